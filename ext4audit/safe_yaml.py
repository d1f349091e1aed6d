"""The one YAML loader for every file the controller reads from users (waivers, the rule catalog,
the kernel-issue table, the probe's level sets): PyYAML's safe loader without aliases.

An alias (*name) makes one node stand for a copy of another, so a few hundred bytes of nested
aliases (the "billion laughs" shape) expand into more values than memory holds as soon as
anything walks or prints them. None of these files needs one, so an alias is refused where it
is written, with the file and the line: the document is never built.
"""

import yaml

Error = yaml.YAMLError


class Loader(yaml.SafeLoader):
    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "found the alias *%s: aliases (and << merges) are not allowed in this file"
                % event.anchor, event.start_mark)
        return super().compose_node(parent, index)


def load(path):
    """The document in the file at path (bytes in: PyYAML checks the encoding). Raises OSError,
    Error, and ValueError/RecursionError for a timestamp that is no date or absurd nesting."""
    with open(path, "rb") as handle:  # the stream's name puts the file into every error's mark
        return yaml.load(handle, Loader=Loader)


def compose(path):
    """The file's node tree (line numbers of its entries), with the same refusals as load."""
    with open(path, "rb") as handle:
        return yaml.compose(handle, Loader=Loader)
