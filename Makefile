# The two commands of the README: `make audit` (audit this machine) and `make test`.
# Both set up what they need first: Debian packages (as root) and ./.venv from requirements.txt.
SHELL := /bin/bash
VENV := .venv
PYTHON ?= python3
# e2fsprogs, util-linux: the audit and the probe; openssh-server, sshfs: the tests' real network mount.
APT_PACKAGES := e2fsprogs util-linux openssh-server sshfs
APT_COMMANDS := dumpe2fs debugfs losetup /usr/sbin/sshd sshfs
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

.PHONY: setup deps audit test lint rules clean
setup: deps $(VENV)/.installed

# Debian packages the audit and the tests use; installed only when a tool is missing.
deps:
	@for c in $(APT_COMMANDS); do command -v $$c >/dev/null || missing=1; done; \
	if [ -n "$$missing" ]; then echo "installing $(APT_PACKAGES)"; apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(APT_PACKAGES); fi

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements.txt
	touch $@

# Main job: audit this machine with the embedded inventory (exit code is the gate's).
audit: setup
	$(VENV)/bin/ansible-playbook playbooks/audit.yml $(ARGS)

# Unit tests, then the integration tests (root: loop devices and real ansible-playbook runs).
test: setup
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS) tests

lint: setup
	$(VENV)/bin/ansible-lint --profile production playbooks roles

rules: setup
	$(VENV)/bin/python -m ext4audit rules

clean:
	rm -rf $(VENV) .pytest_cache
