"""The check result as JUnit XML (the Ant/Jenkins format CI systems read): one testcase per rule,
a ``failure`` element with a message when it failed, ``skipped`` when it had nothing to check."""

from __future__ import annotations

import socket
import xml.etree.ElementTree as ET
from typing import Any


def _fmt(value: Any, unit: str) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3f} {unit}".strip() if unit != "%" else f"{value:.1f}%"


def render(doc: dict[str, Any], suite_name: str = "commprof check", html_report: str | None = None) -> str:
    """``doc``: the check JSON document (commprof.check.render.build). ``html_report``: the HTML report's path,
    named as a suite property and in every case's output as an attachment (``[[ATTACHMENT|path]]``, which GitLab's
    test report and Jenkins' JUnit attachments plugin link)."""
    rules = doc["rules"]
    counts = doc["summary"]
    suites = ET.Element("testsuites", {
        "name": "commprof", "tests": str(len(rules)), "failures": str(counts["failed"]), "errors": "0",
        "skipped": str(counts["skipped"]), "time": "0",
    })
    suite = ET.SubElement(suites, "testsuite", {
        "name": suite_name, "tests": str(len(rules)), "failures": str(counts["failed"]), "errors": "0",
        "skipped": str(counts["skipped"]), "time": "0", "timestamp": doc["generated_at"][:19],
        "hostname": socket.gethostname() or "localhost",
    })
    props = ET.SubElement(suite, "properties")
    run = doc["report"]["run"]
    for name, value in [("run", run.get("path")), ("config", doc["config"].get("source")),
                        ("baseline", doc.get("baseline")), ("html_report", html_report)]:
        if value is not None:
            ET.SubElement(props, "property", {"name": name, "value": str(value)})
    for r in rules:
        case = ET.SubElement(suite, "testcase", {"classname": "commprof.check", "name": r["name"], "time": "0"})
        summary = f"measured {_fmt(r['measured'], r['unit'])}, allowed {_fmt(r['allowed'], r['unit'])}"
        if r["status"] == "fail":
            first = r["violations"][0]["message"] if r["violations"] else r["detail"]
            extra = f" (+{len(r['violations']) - 1} more)" if len(r["violations"]) > 1 else ""
            failure = ET.SubElement(case, "failure", {"message": f"{first}{extra}", "type": "threshold"})
            failure.text = "\n".join([f"{r['description']}: {summary}", r["detail"],
                                      *(v["message"] for v in r["violations"])])
        elif r["status"] == "skip":
            ET.SubElement(case, "skipped", {"message": r["detail"] or "nothing to check"})
        else:
            out = ET.SubElement(case, "system-out")
            out.text = f"{r['description']}: {summary}. {r['detail']}"
        if html_report is not None:  # every case links it: a failure's reader opens the pictures from there
            found = case.find("system-out")
            out = found if found is not None else ET.SubElement(case, "system-out")
            link = f"HTML report: {html_report} [[ATTACHMENT|{html_report}]]"
            out.text = f"{out.text}\n{link}" if out.text else link
    if not len(props):
        suite.remove(props)

    ET.indent(suites)
    xml: str = ET.tostring(suites, encoding="unicode", xml_declaration=False)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + xml + "\n"
