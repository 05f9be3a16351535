"""What the CLI may write and replace (sim.output.files.output_paths): nothing a user types makes
fleetsim delete or overwrite what it did not write, and an output that cannot be
written is a located error (exit 2) before any work runs."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import sim
from sim.cli import main
from sim.output.files.output_paths import MARKER, MAX_SLUG_CHARS, has_marker, slug

SCENARIO = """\
name: {name}
seed: 1
duration: 5s
workload:
  streams:
    chat:
      model: llama-3.1-8b
      arrival: {{type: poisson, rate: 2/s}}
      prompt_tokens: {{type: fixed, value: 100}}
      output_tokens: {{type: fixed, value: 10}}
pools:
  main:
    model: llama-3.1-8b
    hardware: H100-SXM
    replicas: 1
"""


def run_main(args: list[str]) -> int:
    """``sim.cli.main`` with argparse's SystemExit turned into its exit code."""
    try:
        return main(args)
    except SystemExit as exc:
        return exc.code


def write_scenario(folder: Path, name: str = "safe", file: str = "s.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file
    path.write_text(SCENARIO.format(name=json.dumps(name)), encoding="utf-8")
    return path


def tree_hashes(root: Path) -> dict[str, str]:
    """Every file and link under ``root`` (links not followed) with a hash of its content."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + [d for d in dirnames if os.path.islink(Path(dirpath, d))]:
            path = Path(dirpath, name)
            data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
            out[str(path.relative_to(root))] = hashlib.sha256(data).hexdigest()
    return out


@pytest.fixture(autouse=True)
def _small_outputs(monkeypatch):
    """A result folder of one file (plots and the page are slow and beside the point)."""
    import sim.output.files.outputs

    def write_all(results, folder, *args):
        path = folder / "summary.json"
        path.write_text(sim.output.files.outputs.summary_json(results.summary))
        return [path]

    monkeypatch.setattr(sim.output.files.outputs, "_write_all", write_all)


@pytest.fixture
def no_simulation(monkeypatch):
    """Fail the test if a simulation starts: the output must be checked first."""
    def refuse(*args, **kwargs):
        raise AssertionError("the simulation ran before the output was checked")

    monkeypatch.setattr(sim, "run", refuse)


# -- default folder names -----------------------------------------------------------------

def _h(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:8]


@pytest.mark.parametrize("name,expected", [
    (".", f"scenario-{_h('.')}"), ("", f"scenario-{_h('')}"), ("..", f"scenario-{_h('..')}"),
    ("../../x", f"x-{_h('../../x')}"), ("/abs/path", f"abs-path-{_h('/abs/path')}"),
    ("a\x00b\nc\td", f"a-b-c-d-{_h(chr(0).join(['a', 'b']) + chr(10) + 'c' + chr(9) + 'd')}"),
    ("héllo wörld", f"hello-world-{_h('héllo wörld')}"),
    ("v1.2_run-3", "v1.2_run-3"), ("x" * 500, "x" * 71 + "-" + _h("x" * 500)),
    (".hidden", f"hidden-{_h('.hidden')}"), ("x" * MAX_SLUG_CHARS, "x" * MAX_SLUG_CHARS),
])
def test_slug_examples(name, expected):
    """A plain name is its own slug; any other gets a hash of the name."""
    assert slug(name) == expected


@pytest.mark.parametrize("a,b", [("chat 70b", "chat/70b"), ("chat 70b", "chat:70b"),
                                 ("日本語", "模型"), ("x" * 81, "x" * 80 + "y"),
                                 ("chat-70b", "chat 70b"), ("..", "  ")])
def test_distinct_names_never_share_a_slug(a, b):
    assert slug(a) != slug(b)


def test_two_scenarios_whose_names_differ_get_two_folders(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    one = write_scenario(tmp_path / "in", "chat 70b", "c1.yaml")
    two = write_scenario(tmp_path / "in", "chat/70b", "c2.yaml")
    assert run_main(["run", str(one), "--quiet"]) == 0
    assert run_main(["run", str(two), "--quiet"]) == 0
    assert len(list((tmp_path / "results").iterdir())) == 2


@given(st.text())
def test_slug_is_always_one_safe_name(name):
    text = slug(name)
    assert 0 < len(text) <= MAX_SLUG_CHARS
    assert text not in (".", "..") and not text.startswith((".", "-"))
    assert all(c.isascii() and (c.isalnum() or c in "._-") for c in text)


@pytest.mark.parametrize("name", [".", "..", "../../x", "/tmp/abs", "a/../../b",
                                  "x" * 128, "bell and/newline"])
def test_default_folder_stays_under_results(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    path = write_scenario(tmp_path / "in", name)
    (tmp_path / "results" / "other").mkdir(parents=True)
    (tmp_path / "results" / "other" / "keep.txt").write_text("another result")
    for _ in range(2):
        assert run_main(["run", str(path), "--quiet", "--force"]) == 0
    made = sorted(p.name for p in (tmp_path / "results").iterdir())
    assert made == sorted(["other", slug(name)])
    assert (tmp_path / "results" / slug(name) / "summary.json").is_file()
    assert (tmp_path / "results" / "other" / "keep.txt").read_text() == "another result"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "results"]


@pytest.mark.parametrize("name", ["", "x" * 129, "bell\x07 and\nnewline"])
def test_a_name_too_long_or_unprintable_writes_nothing(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    path = write_scenario(tmp_path / "in", name)
    assert run_main(["run", str(path), "--quiet"]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


# -- --force replaces only what fleetsim wrote --------------------------------------------

def test_force_cannot_delete_anything_it_did_not_write(tmp_path, monkeypatch, capsys):
    """`run proj/s.yaml --out proj --force`, and every other folder a user might type."""
    proj = tmp_path / "proj"
    scenario = write_scenario(proj)
    (proj / "notes.txt").write_text("precious")
    (proj / "data").mkdir()
    (proj / "data" / "table.csv").write_text("a,b\n1,2\n")
    monkeypatch.chdir(proj)
    before = tree_hashes(tmp_path)
    for out in (proj, proj / "data", ".", "..", "data/..", str(tmp_path), "/"):
        assert run_main(["run", str(scenario), "--out", str(out), "--quiet", "--force"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "Traceback" not in err
        assert tree_hashes(tmp_path) == before, out


def test_force_never_replaces_the_folder_holding_the_scenario(tmp_path, capsys):
    out = tmp_path / "out"
    assert run_main(["run", str(write_scenario(tmp_path)), "--out", str(out), "--quiet"]) == 0
    again = out / "s.yaml"
    again.write_text((tmp_path / "s.yaml").read_text())
    before = tree_hashes(out)
    assert run_main(["run", str(again), "--out", str(out), "--quiet", "--force"]) == 2
    assert "input" in capsys.readouterr().err
    assert tree_hashes(out) == before


def test_force_replaces_an_earlier_fleetsim_output(tmp_path):
    out = tmp_path / "out"
    scenario = write_scenario(tmp_path)
    assert run_main(["run", str(scenario), "--out", str(out), "--quiet"]) == 0
    assert has_marker(out)
    marker = (out / MARKER).read_bytes()
    assert "summary.json" in json.loads(marker)["files"]
    (out / "summary.json").write_text("edited")
    assert run_main(["run", str(scenario), "--out", str(out), "--quiet", "--force"]) == 0
    assert (out / "summary.json").read_text() != "edited"
    assert (out / MARKER).read_bytes() == marker          # no clock, no pid
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "s.yaml"]


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_a_result_folder_has_the_umasks_mode_and_a_prepared_one_keeps_its_own(tmp_path, mask):
    """The folder is built under a private temporary name; once in place it has the mode
    any folder made here would (readable by the group, a web server or a CI uploader when
    the umask says so), and a folder the user prepared keeps its mode, set-group-ID bit
    included."""
    scenario = write_scenario(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o2775)
    before = os.umask(mask)
    try:
        for out in (tmp_path / "fresh", shared):
            assert run_main(["run", str(scenario), "--out", str(out), "--quiet"]) == 0
    finally:
        os.umask(before)
    assert (tmp_path / "fresh").stat().st_mode & 0o7777 == 0o777 & ~mask
    assert shared.stat().st_mode & 0o7777 == 0o2775
    assert (shared / "summary.json").is_file()


@pytest.mark.parametrize("extra", ["NOTES.md", "analysis/fit.ipynb", "plots/mine.png",
                                   "empty-folder/"])
def test_force_refuses_a_marked_folder_holding_files_it_did_not_write(tmp_path, capsys, extra):
    """The marker lists what fleetsim wrote; anything else in the folder stops --force."""
    out = tmp_path / "out"
    scenario = write_scenario(tmp_path)
    assert run_main(["run", str(scenario), "--out", str(out), "--quiet"]) == 0
    added = out / extra
    if extra.endswith("/"):
        added.mkdir()
    else:
        added.parent.mkdir(exist_ok=True)
        added.write_text("mine")
    before = tree_hashes(out)
    assert run_main(["run", str(scenario), "--out", str(out), "--quiet", "--force"]) == 2
    assert extra.split("/")[0] in capsys.readouterr().err
    assert tree_hashes(out) == before and added.exists()


def test_force_never_deletes_a_data_file_the_scenario_reads(tmp_path, capsys):
    out = tmp_path / "out"
    scenario = write_scenario(tmp_path)
    assert run_main(["run", str(scenario), "--out", str(out), "--quiet"]) == 0
    marker = json.loads((out / MARKER).read_text())
    (out / "trace.csv").write_text("timestamp,prompt_tokens,output_tokens\n0.1,10,5\n")
    marker["files"].append("trace.csv")          # even when the marker vouches for it
    (out / MARKER).write_text(json.dumps(marker))
    lines = scenario.read_text().replace("{type: poisson, rate: 2/s}",
                                         "{type: trace, path: out/trace.csv}").splitlines()
    scenario.write_text("\n".join(x for x in lines if "_tokens:" not in x) + "\n")
    assert run_main(["run", str(scenario), "--out", str(out), "--quiet", "--force"]) == 2
    assert "trace.csv" in capsys.readouterr().err
    assert (out / "trace.csv").is_file()


@pytest.mark.parametrize("marker", [{"written_by": "fleetsim"},
                                    {"written_by": "fleetsim", "files": None},
                                    {"written_by": "fleetsim", "files": 5},
                                    {"written_by": "fleetsim", "files": "notes.txt"},
                                    {"written_by": "fleetsim", "files": {"notes.txt": 1}},
                                    {"written_by": "fleetsim", "files": [1, 2]}])
def test_a_marker_without_a_list_of_files_vouches_for_nothing(tmp_path, capsys, marker):
    """A damaged, old or forged marker that lists no files never lets --force replace the
    folder: everything in it may be the user's."""
    out = tmp_path / "out"
    out.mkdir()
    (out / MARKER).write_text(json.dumps(marker))
    (out / "notes.txt").write_text("precious")
    scenario = write_scenario(tmp_path / "in")
    before = tree_hashes(tmp_path)
    assert run_main(["run", str(scenario), "--out", str(out), "--quiet", "--force"]) == 2
    assert "does not list" in capsys.readouterr().err
    assert tree_hashes(tmp_path) == before


def test_a_forged_marker_that_is_a_link_does_not_count(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "elsewhere.json").write_text('{"written_by": "fleetsim"}')
    (out / MARKER).symlink_to(tmp_path / "elsewhere.json")
    (out / "keep.txt").write_text("precious")
    scenario = write_scenario(tmp_path / "in")
    before = tree_hashes(tmp_path)
    assert run_main(["run", str(scenario), "--out", str(out), "--quiet", "--force"]) == 2
    assert "did not write" in capsys.readouterr().err
    assert tree_hashes(tmp_path) == before


@pytest.mark.parametrize("target_kind", ["empty", "fleetsim output", "user files"])
def test_a_link_as_output_folder_is_refused_and_not_followed(tmp_path, capsys, target_kind):
    scenario = write_scenario(tmp_path / "in")
    target = tmp_path / "target"
    if target_kind == "fleetsim output":
        assert run_main(["run", str(scenario), "--out", str(target), "--quiet"]) == 0
    else:
        target.mkdir()
        if target_kind == "user files":
            (target / "keep.txt").write_text("precious")
    link = tmp_path / "link"
    link.symlink_to(target, target_is_directory=True)
    before = tree_hashes(tmp_path)
    assert run_main(["run", str(scenario), "--out", str(link), "--quiet", "--force"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {link}: ") and "symbolic link" in err
    assert tree_hashes(tmp_path) == before and link.is_symlink()


# -- leftovers of killed runs -------------------------------------------------------------

def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def leftover(parent: Path, name: str, pid: int, *, marker: bool = True,
             kind: str = "tmp") -> Path:
    folder = parent / f".{name}.{kind}-{pid}"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text("{}")
    if marker:
        (folder / MARKER).write_text('{"written_by": "fleetsim", "stage": true}\n')
    return folder


def test_leftovers_of_killed_runs_are_removed_by_the_next_run(tmp_path):
    results = tmp_path / "results"
    pid = dead_pid()
    gone = [leftover(results, "run", pid), leftover(results, "other", pid)]
    kept_no_marker = leftover(results, "mine", pid, marker=False)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        kept_alive = leftover(results, "busy", sleeper.pid)
        assert run_main(["run", str(write_scenario(tmp_path)), "--out",
                         str(results / "run"), "--quiet"]) == 0
        assert not any(p.exists() for p in gone)
        assert kept_no_marker.is_dir() and kept_alive.is_dir()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert sorted(p.name for p in results.iterdir()) == sorted(
        ["run", kept_no_marker.name, kept_alive.name])


KILLED_WHILE_WRITING = """\
import sys, time
import sim.output.files.outputs
from sim.cli import main

def slow(results, folder, *args):
    (folder / "summary.json").write_text("{}")
    print("writing", flush=True)
    time.sleep(120)

sim.output.files.outputs._write_all = slow
main(["run", sys.argv[1], "--out", sys.argv[2], "--quiet"])
"""


def test_a_run_killed_while_writing_is_cleaned_up_by_the_next(tmp_path):
    import signal
    out = tmp_path / "results" / "run"
    scenario = write_scenario(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", KILLED_WHILE_WRITING, str(scenario),
                              str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "writing"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    [left] = (tmp_path / "results").glob(f".run.tmp-{child.pid}-*")
    assert left.is_dir() and has_marker(left) and not out.exists()
    assert run_main(["run", str(scenario), "--out", str(out), "--quiet"]) == 0
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["run"]


def test_a_failed_write_leaves_nothing_and_exits_1(tmp_path, monkeypatch, capsys):
    import errno

    import sim.output.files.outputs

    def full(results, folder, *args):
        raise OSError(errno.ENOSPC, "No space left on device", str(folder / "summary.json"))

    monkeypatch.setattr(sim.output.files.outputs, "_write_all", full)
    out = tmp_path / "results" / "run"
    assert run_main(["run", str(write_scenario(tmp_path)), "--out", str(out), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "No space left on device" in err
    assert "Traceback" not in err
    assert list((tmp_path / "results").iterdir()) == []


# -- outputs that cannot be written, found before the work --------------------------------

def unwritable_places(tmp_path: Path) -> list[Path]:
    """Folders no one can create: below a regular file, inside /proc; and, when not
    root (root passes permission checks), inside a read-only folder."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    places = [blocker / "out", Path("/proc") / "fleetsim-test" / "out"]
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        places.append(locked / "out")
    return places


@pytest.mark.parametrize("command", [
    ["run"], ["run", "--replications", "2"], ["size", "--slo", "ttft_p99=2s"],
    ["sweep", "--vary", "pools.main.replicas=1,2"],
])
def test_unwritable_output_is_found_before_the_work(tmp_path, monkeypatch, capsys,
                                                    no_simulation, command):
    import sim.planning.runner
    import sim.planning.size
    import sim.planning.sweep

    for module, name in ((sim.planning.size, "size"), (sim.planning.sweep, "sweep"),
                         (sim.planning.runner, "run_many")):
        monkeypatch.setattr(module, name, sim.run)    # the refusing stand-in
    scenario = write_scenario(tmp_path / "in")
    for place in unwritable_places(tmp_path):
        out = place / "table.csv" if command[0] == "sweep" else place
        code = run_main([command[0], str(scenario), *command[1:], "--out", str(out)])
        err = capsys.readouterr().err
        assert code == 2, (place, err)
        assert err.startswith("error: ") and "Traceback" not in err
        assert "fleetsim-test" in err or str(tmp_path) in err


@pytest.mark.parametrize("name,fragment", [(b"a" * 250, "File name too long"),
                                           (b"\xff", "not valid UTF-8")],
                         ids=["too long", "not UTF-8"])
def test_an_impossible_output_name_is_found_before_the_work(tmp_path, capsys, no_simulation,
                                                            name, fragment):
    out = tmp_path / "results" / os.fsdecode(name)
    assert run_main(["run", str(write_scenario(tmp_path)), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and fragment in err and "Traceback" not in err
    assert ".tmp-" not in err
    assert list((tmp_path / "results").glob("*")) == []


def test_sweep_replaces_only_its_own_tables(tmp_path, capsys, no_simulation, monkeypatch):
    import sim.planning.sweep
    monkeypatch.setattr(sim.planning.sweep, "sweep", sim.run)
    scenario = write_scenario(tmp_path / "in")
    mine = tmp_path / "mine.csv"
    mine.write_text("name,value\nalice,1\n")
    page = tmp_path / "page.html"
    page.write_text("<html>my page</html>")
    before = tree_hashes(tmp_path)
    for flags in (["--out", str(mine)], ["--out", str(tmp_path / "t.csv"), "--report", str(page)],
                  ["--out", str(scenario)]):
        code = run_main(["sweep", str(scenario), "--vary", "pools.main.replicas=1,2", *flags])
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err
        assert tree_hashes(tmp_path) == before


def test_size_and_replications_refuse_a_users_folder(tmp_path, capsys, no_simulation):
    scenario = write_scenario(tmp_path / "in")
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "keep.txt").write_text("precious")
    before = tree_hashes(tmp_path)
    for command in (["size", "--slo", "ttft_p99=2s"], ["run", "--replications", "2"]):
        code = run_main([command[0], str(scenario), *command[1:], "--out", str(proj),
                         "--force"])
        assert code == 2 and "did not write" in capsys.readouterr().err
        assert tree_hashes(tmp_path) == before


def test_a_closed_pipe_ends_quietly(tmp_path):
    """`fleetsim schema | head`: the reader goes away before fleetsim writes."""
    child = subprocess.Popen([sys.executable, "-m", "sim.cli", "schema"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    child.stdout.close()
    err = child.stderr.read().decode()
    assert child.wait(timeout=120) == 0
    assert err == ""


# -- check --update, single files, calibrated profiles ----------------------------------

def test_check_update_never_overwrites_an_input_or_a_users_file(tmp_path, capsys,
                                                                 no_simulation):
    scenario = write_scenario(tmp_path)
    user = tmp_path / "user.json"
    user.write_text('{"mine": 1}')
    yaml_file = tmp_path / "victim.yaml"
    yaml_file.write_text("not: json\n")
    for target in (scenario, user, yaml_file, tmp_path):
        before = tree_hashes(tmp_path)
        assert run_main(["check", str(scenario), "--baseline", str(target), "--slo",
                         "ttft_p99=2s", "--update"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "Traceback" not in err
        assert tree_hashes(tmp_path) == before


def test_check_reads_a_baseline_that_is_not_json_as_a_located_error(tmp_path, capsys):
    scenario = write_scenario(tmp_path)
    bad = tmp_path / "b.json"
    bad.write_text("not: json\n")
    assert run_main(["check", str(scenario), "--baseline", str(bad), "--slo",
                     "ttft_p99=2s"]) == 2
    assert f"{bad}:1" in capsys.readouterr().err


def test_check_update_replaces_its_own_baseline(tmp_path):
    scenario = write_scenario(tmp_path)
    base = tmp_path / "base.json"
    args = ["check", str(scenario), "--baseline", str(base), "--slo", "ttft_p99=2s"]
    assert run_main(args + ["--update"]) == 0
    assert run_main(args + ["--update"]) == 0
    assert run_main(args) == 0


def test_a_link_planted_at_the_temporary_name_is_not_written_through(tmp_path):
    from sim.output.files.atomic_write import write_file
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "t.csv"
    for name in (f".t.csv.tmp-{os.getpid()}", f".t.csv.tmp-{os.getpid()}-abcdefgh"):
        (tmp_path / name).symlink_to(victim)
    write_file(out, "a,b\n1,2\n")
    assert victim.read_text() == "precious"
    assert not out.is_symlink() and out.read_text() == "a,b\n1,2\n"


def test_a_users_file_named_like_a_stale_temporary_survives(tmp_path):
    """Only a marked staging folder of a dead process is removed: never a user's file or
    unmarked folder that happens to carry the name."""
    from sim.output.files.atomic_write import write_file
    from sim.output.files.output_names import write_marker
    pid = dead_pid()
    mine = tmp_path / f".t.csv.tmp-{pid}-abcdefgh"
    mine.write_text("precious")
    unmarked = tmp_path / f".t.csv.tmp-{pid}-ijklmnop"
    unmarked.mkdir()
    ours = tmp_path / f".t.csv.tmp-{pid}-qrstuvwx"
    ours.mkdir()
    write_marker(ours, "write t.csv", stage=True)
    (ours / "data").write_text("half written")
    write_file(tmp_path / "t.csv", "a\n1\n")
    assert mine.read_text() == "precious" and unmarked.is_dir()
    assert not ours.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [mine.name, unmarked.name, "t.csv"])


def test_folders_named_like_this_processs_temporaries_survive_a_run(tmp_path):
    """A user's folders named .NAME.tmp-PID and .NAME.old-PID with this very process's
    PID (a PID is easy to guess) were removed unchecked before the results were
    written; the run now works under fresh names and leaves them be."""
    from sim.output.files.outputs import write_folder
    out = tmp_path / "res"
    planted = [tmp_path / f".res.tmp-{os.getpid()}", tmp_path / f".res.old-{os.getpid()}"]
    for folder in planted:
        folder.mkdir()
        (folder / "thesis.tex").write_text("precious")

    def write(folder: Path) -> list[Path]:
        (folder / "summary.json").write_text("{}")
        return [folder / "summary.json"]

    write_folder(write, out, force=False, command="run")
    write_folder(write, out, force=True, command="run")          # and replacing it
    assert all((folder / "thesis.tex").read_text() == "precious" for folder in planted)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["res", *(folder.name for folder in planted)])


def test_a_marked_stale_folder_holding_a_users_file_survives(tmp_path):
    """A folder named like a killed run's and holding a marker is still left alone when it
    holds a file fleetsim never writes (a marker vouches for what it lists, or for
    fleetsim's own output names while it lists nothing yet)."""
    from sim.output.files.atomic_write import write_file
    from sim.output.files.output_names import write_marker
    pid = dead_pid()
    kept = []
    for name, files in ((f".t.csv.tmp-{pid}-abcdefgh", []),
                        (f".keep.tmp-{pid}", ["summary.json"]),
                        (f".keep.old-{pid}", None)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "thesis.tex").write_text("precious")
        write_marker(folder, "run", files)
        kept.append(folder)
    write_file(tmp_path / "t.csv", "a\n1\n")
    assert all((folder / "thesis.tex").read_text() == "precious" for folder in kept)


def test_calibrate_replaces_only_its_own_profiles(tmp_path, capsys):
    from calibrate.output import check_profile_files, is_profile
    from sim.config.errors import ScenarioError
    ours = tmp_path / "ours.yaml"
    ours.write_text("# header\nkind: fleetsim-calibrated-step-time\nversion: 1\n")
    mine = tmp_path / "mine.yaml"
    mine.write_text("my hand-tuned profile\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(ours)
    assert is_profile(ours) and not is_profile(mine)
    check_profile_files(ours, ".png", ".log")
    (tmp_path / "mine.log").write_text("mine")
    for path, siblings in ((mine, ()), (link, ()), (tmp_path / "mine.yaml", (".log",))):
        with pytest.raises(ScenarioError):
            check_profile_files(path, *siblings)
    ours.with_suffix(".log").write_text("x")
    check_profile_files(ours, ".log")


def test_calibrate_from_kernels_refuses_a_users_file_before_the_work(tmp_path, capsys,
                                                                     monkeypatch):
    pytest.importorskip("calibrate.kernels.from_kernels")
    from calibrate.kernels import from_kernels
    from sim.cost.measured import profile_name

    def boom(*a, **k):
        raise AssertionError("the work ran")

    monkeypatch.setattr(from_kernels, "build", boom)
    target = tmp_path / profile_name("llama-3.1-8b", 1, "bf16", "bf16")
    target.write_text("my hand-tuned profile\n")
    assert run_main(["calibrate", "--from", "aiconfigurator", "--gpu", "H100-SXM", "--model",
                     "llama-3.1-8b", "--out", str(tmp_path), "--quiet"]) == 2
    assert "not a calibrated profile" in capsys.readouterr().err
    assert target.read_text() == "my hand-tuned profile\n"


# -- identity, races, standard output ----------------------------------------------------

def test_a_bind_mount_of_the_input_folder_does_not_get_past_the_guard(tmp_path, capsys):
    real, alias = tmp_path / "real", tmp_path / "alias"
    scenario = write_scenario(real / "out")
    alias.mkdir()
    if subprocess.run(["mount", "--bind", str(real), str(alias)],
                      capture_output=True).returncode != 0:
        pytest.skip("bind mounts are not available here")
    try:
        (real / "out" / MARKER).write_text('{"written_by": "fleetsim"}')
        assert run_main(["run", str(alias / "out" / "s.yaml"), "--out", str(real / "out"),
                         "--quiet", "--force"]) == 2
        assert "input" in capsys.readouterr().err
        assert scenario.is_file()
    finally:
        subprocess.run(["umount", str(alias)], check=False)


def test_guards_compare_identities_not_names(tmp_path):
    """A second name for the input's folder (here a hard-to-spot link above it) is caught."""
    from sim.output.files.output_paths import check_folder
    from sim.config.errors import ScenarioError
    proj = tmp_path / "proj"
    scenario = write_scenario(proj)
    (proj / MARKER).write_text('{"written_by": "fleetsim"}')
    (tmp_path / "other").symlink_to(tmp_path)
    with pytest.raises(ScenarioError, match="input"):
        check_folder(proj, force=True, inputs=[tmp_path / "other" / "proj" / "s.yaml"])
    assert scenario.is_file()


def test_a_folder_swapped_in_before_the_removal_is_put_back(tmp_path, monkeypatch, capsys):
    import sim.output.files.atomic_write
    out = tmp_path / "out"
    scenario = write_scenario(tmp_path)
    assert run_main(["run", str(scenario), "--out", str(out), "--quiet"]) == 0
    real_replace = os.replace

    def racing(src, dst):
        if Path(src) == out and ".old-" in str(dst):   # a user's folder appears just now
            real_replace(out, tmp_path / "ours-moved")
            out.mkdir()
            (out / "thesis.tex").write_text("mine")
        return real_replace(src, dst)

    monkeypatch.setattr(sim.output.files.atomic_write.os, "replace", racing)
    assert run_main(["run", str(scenario), "--out", str(out), "--quiet", "--force"]) == 1
    assert "not saved" in capsys.readouterr().err
    assert (out / "thesis.tex").read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_folder_that_appears_during_the_run_exits_1_and_says_so(tmp_path, monkeypatch,
                                                                   capsys):
    import sim.output.files.outputs
    out = tmp_path / "out"
    scenario = write_scenario(tmp_path)
    real_write_all = sim.output.files.outputs._write_all

    def meanwhile(results, folder, *args):
        out.mkdir()
        (out / "theirs.txt").write_text("x")
        return real_write_all(results, folder, *args)

    monkeypatch.setattr(sim.output.files.outputs, "_write_all", meanwhile)
    assert run_main(["run", str(scenario), "--out", str(out), "--quiet"]) == 1
    assert "results were not saved" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["theirs.txt"]


@pytest.mark.parametrize("command,redirect,code", [
    (["schema"], ">&-", 1), (["schema"], "> /dev/full", 1), (["profiles"], "| true", 0),
    (["run", "{s}", "--out", "{o}"], "> /dev/full", 1),
    (["run", "{s}", "--out", "{o}"], ">&-", 1),
])
def test_a_closed_or_full_stdout_is_a_located_error(tmp_path, command, redirect, code):
    """Exit 0 only for a print-only command whose reader went away; else exit 1, naming
    <stdout>, and a run's results are saved all the same."""
    if redirect == "> /dev/full" and not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    scenario = write_scenario(tmp_path)
    args = " ".join(a.format(s=scenario, o=tmp_path / "out") for a in command)
    shell = f"set -o pipefail; {sys.executable} -m sim {args} {redirect}"
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True,
                          cwd=Path(sim.__file__).parent.parent)
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    if code:
        assert "<stdout>" in done.stderr
    if command[0] == "run":
        assert (tmp_path / "out" / "summary.json").is_file()


@pytest.mark.parametrize("argv", [
    ["check", "{bad}", "--baseline", "{d}/new/a/b/bl.json", "--update"],
    ["sweep", "{bad}", "--vary", "seed=1,2", "--out", "{d}/new/a/b/t.csv"],
    ["run", "{bad}", "--out", "{d}/new/a/b/run"],
])
def test_a_refused_command_leaves_no_folders_behind(tmp_path, argv):
    """The check that an output can be written made its missing parent folders and left
    them when the command then failed on its input."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nduration: -1s\n", encoding="utf-8")
    assert run_main([a.format(bad=bad, d=tmp_path) for a in argv]) == 2
    assert not (tmp_path / "new").exists()


def test_a_finished_result_folder_named_like_a_stage_is_never_taken_for_a_leftover(tmp_path):
    """--out DIR/.keep.tmp-99999 is a finished result (its marker says so): the next
    command writing into DIR removed it as a killed run's leftover."""
    from sim.output.files.atomic_write import write_file
    from sim.output.files.outputs import write_folder

    def write(folder: Path) -> list[Path]:
        (folder / "summary.json").write_text("{}")
        return [folder / "summary.json"]

    pid = dead_pid()
    kept = [tmp_path / f".keep.tmp-{pid}", tmp_path / ".nightly.old-2024"]
    for folder in kept:
        write_folder(write, folder, force=False, command="run")
    write_folder(write, tmp_path / "other", force=False, command="run")
    write_file(tmp_path / "t.csv", "a\n1\n")
    assert all((folder / "summary.json").read_text() == "{}" for folder in kept)


def test_compare_escapes_pool_names_read_from_a_crafted_summary(tmp_path, capsys):
    """A result folder's summary.json is data: a pool name in it that holds terminal
    control sequences is printed escaped, never raw."""
    from sim.planning.compare import compare, render
    base = {"arrived": 10, "pools": {"main": {"replicas_mean": 1.0, "busy_frac": 0.5}}}
    crafted = json.loads(json.dumps(base))
    crafted["pools"]["\x1b]0;pwned\x07x"] = crafted["pools"]["main"]
    text = render(compare({"a": base, "b": crafted}))
    assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b]0;pwned\\x07x.replicas_mean" in text
