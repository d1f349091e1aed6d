"""The report formats, one module each: report.html (html.py, templates/), junit.xml, summary.md
(markdown.py), report.sarif, metrics.prom (prometheus.py), TAP and the terminal's table, and the
finding groups they share (finding_groups.py). Each reads host reports or their digests and
writes one file; none decides a verdict.

Imports model/, rules/ and report/'s verdict (reports.py).
"""
