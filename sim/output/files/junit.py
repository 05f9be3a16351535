"""JUnit XML for CI systems: one test case per scenario `fleetsim check` compared, a
failure holding what drifted."""
from __future__ import annotations

import re
from pathlib import Path
from xml.etree import ElementTree

SUITE = "fleetsim check"


# characters XML 1.0 cannot hold (control characters, lone surrogates of a file name that
# is not UTF-8): written as \xNN so that the report stays well-formed
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_text(text: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def junit_xml(verdicts, baseline: str) -> str:
    """``verdicts``: (scenario, problems) pairs; no problems means the case passed."""
    cases = list(verdicts)
    failures = sum(1 for _, problems in cases if problems)
    root = ElementTree.Element("testsuites", name=SUITE, tests=str(len(cases)),
                               failures=str(failures))
    suite = ElementTree.SubElement(root, "testsuite", name=SUITE, tests=str(len(cases)),
                                   failures=str(failures))
    ElementTree.SubElement(ElementTree.SubElement(suite, "properties"), "property",
                           name="baseline", value=_xml_text(baseline))
    for scenario, problems in cases:
        case = ElementTree.SubElement(suite, "testcase", classname=SUITE,
                                      name=_xml_text(scenario))
        if problems:
            failure = ElementTree.SubElement(case, "failure", message=_xml_text(problems[0]),
                                             type="drift")
            failure.text = _xml_text("\n".join(problems))
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
