"""The `ext4audit` command: the console script and `python -m ext4audit` start in main().

`ext4audit run` (run.py) starts without the other commands' modules, so ansible-playbook starts
sooner; every other command is cli.main's. A command that a playbook under `ext4audit run` starts
is first handed to run's fork server, which has those modules loaded already (forkserver.py: an
optimisation, about 0.6 s a command); where there is none, or it refuses, the command runs here.
"""

import sys

from ext4audit.cli import forkserver


def main(argv: "list[str] | None" = None) -> int:
    """Run `ext4audit ARGV` (default: this process's arguments); return its exit code."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:  # every argument after it is ansible-playbook's, options too
        from ext4audit.cli import run  # pylint: disable=import-outside-toplevel  # only what `run` needs
        return run.main(argv[1:])
    code = forkserver.forward(argv)
    if code is None:
        from ext4audit.cli import commands as cli  # pylint: disable=import-outside-toplevel  # only when not forwarded
        code = cli.main(argv)
    return code


if __name__ == "__main__":
    sys.exit(main())
