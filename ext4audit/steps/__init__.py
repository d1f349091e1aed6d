"""The controller's jobs, each built from the layers below: the report step over a fleet
(fleet.py: worker processes, one pass per host, every format), the merge of sliced runs
(merge.py), the kernel upgrade gate (kernel_gate.py) and the remediation plan (remediation.py).

Imports every layer below it; only cli/ imports it.
"""
