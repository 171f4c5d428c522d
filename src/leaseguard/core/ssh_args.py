"""The options in an OpenSSH command line (`-o Name=value`, `-J`, `-i`, `-p`, `-l`): where
Ansible keeps a host's jump host, known_hosts file and host-key policy."""

from __future__ import annotations

import shlex

from leaseguard.core.errors import ConfigError

# OpenSSH client flags that take a value, and the -o option each one stands for.
_FLAG_OPTIONS = {"-J": "proxyjump", "-i": "identityfile", "-p": "port", "-l": "user"}
_FLAGS_WITH_VALUE = frozenset("BbcDEeFIiJLlmOoPpQRSWw")


def parse_openssh_args(text: str) -> dict[str, str]:
    """The options by lower-cased name; as in ssh itself, the first value given wins."""
    try:
        words = shlex.split(text)
    except ValueError:
        raise ConfigError("the host's ssh arguments cannot be parsed (unbalanced quotes)") from None
    options: dict[str, str] = {}
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if not word.startswith("-") or len(word) < 2 or word[1] not in _FLAGS_WITH_VALUE:
            continue
        flag, value = word[:2], word[2:]
        if not value and index < len(words):
            value, index = words[index], index + 1
        if flag == "-o":
            name, _, option_value = value.replace("=", " ", 1).partition(" ")
            options.setdefault(name.strip().lower(), option_value.strip())
        elif flag in _FLAG_OPTIONS:
            options.setdefault(_FLAG_OPTIONS[flag], value)
    return options
