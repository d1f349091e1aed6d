"""The `ext4audit` command: its subcommands (commands.py), `ext4audit run` around ansible-playbook
(run.py), the fork server that saves a playbook's commands their start-up (forkserver.py) and the
version check of the roles' preflight (version.py). The top layer: nothing imports it but
ext4audit.__main__."""
