"""JUnit XML for CI systems: one test case per scenario `fleetsim check` compared, a
failure holding what drifted."""
from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

SUITE = "fleetsim check"


def junit_xml(verdicts, baseline: str) -> str:
    """``verdicts``: (scenario, problems) pairs; no problems means the case passed."""
    cases = list(verdicts)
    failures = sum(1 for _, problems in cases if problems)
    root = ElementTree.Element("testsuites", name=SUITE, tests=str(len(cases)),
                               failures=str(failures))
    suite = ElementTree.SubElement(root, "testsuite", name=SUITE, tests=str(len(cases)),
                                   failures=str(failures))
    ElementTree.SubElement(ElementTree.SubElement(suite, "properties"), "property",
                           name="baseline", value=baseline)
    for scenario, problems in cases:
        case = ElementTree.SubElement(suite, "testcase", classname=SUITE, name=scenario)
        if problems:
            failure = ElementTree.SubElement(case, "failure", message=problems[0],
                                             type="drift")
            failure.text = "\n".join(problems)
    ElementTree.indent(root)
    return ('<?xml version="1.0" encoding="utf-8"?>\n'
            + ElementTree.tostring(root, encoding="unicode") + "\n")


def is_junit_report(path: Path) -> bool:
    """True for a report :func:`junit_xml` wrote (read as text, not parsed: an XML file
    from elsewhere is never expanded)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(512).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return head.startswith('<?xml version="1.0" encoding="utf-8"?>\n'
                           f'<testsuites name="{SUITE}"')
