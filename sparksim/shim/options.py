"""docker-style option parsing: `--name X`, `--name=X`, `-e K=V`, clustered `-dit`."""

from dataclasses import dataclass, field


class UsageError(Exception):
    """Bad docker usage; docker prints the message and exits 125 (run) or 1."""


@dataclass
class ParsedOptions:
    values: dict[str, list[str]] = field(default_factory=dict)
    flags: set[str] = field(default_factory=set)
    rest: list[str] = field(default_factory=list)

    def last(self, name: str, default: str | None = None) -> str | None:
        found = self.values.get(name)
        return found[-1] if found else default

    def all(self, name: str) -> list[str]:
        return self.values.get(name, [])


def parse_options(
    argv: list[str],
    with_value: dict[str, str],
    boolean: dict[str, str],
    command: str,
    stop_at_positional: bool = True,
) -> ParsedOptions:
    """Parse options until the first positional (the image or the container name).

    with_value/boolean map every spelling (`-e`, `--env`) to a canonical name.
    """
    parsed = ParsedOptions()
    index = 0
    while index < len(argv):
        item = argv[index]
        if item == "--":
            parsed.rest = argv[index + 1 :]
            return parsed
        if not item.startswith("-") or item == "-":
            if stop_at_positional:
                parsed.rest = argv[index:]
                return parsed
            parsed.rest.append(item)
            index += 1
            continue
        name, has_inline, inline = item.partition("=")
        if name in with_value:
            if has_inline:
                value = inline
            elif index + 1 < len(argv):
                index += 1
                value = argv[index]
            else:
                raise UsageError(f"flag needs an argument: {name}")
            parsed.values.setdefault(with_value[name], []).append(value)
        elif name in boolean:
            if not has_inline or inline.lower() in ("true", "1"):
                parsed.flags.add(boolean[name])
        elif not item.startswith("--") and len(item) > 2:
            _short_cluster(item, with_value, boolean, parsed, command)
        else:
            raise UsageError(f"unknown flag: {name}\nSee 'docker {command} --help'.")
        index += 1
    return parsed


def _short_cluster(
    item: str, with_value: dict[str, str], boolean: dict[str, str], parsed: ParsedOptions,
    command: str,
) -> None:
    # `-dit` is -d -i -t; `-eKEY=V` is -e KEY=V.
    for position, letter in enumerate(item[1:], start=1):
        flag = "-" + letter
        if flag in boolean:
            parsed.flags.add(boolean[flag])
        elif flag in with_value and position + 1 < len(item):
            parsed.values.setdefault(with_value[flag], []).append(item[position + 1 :])
            return
        else:
            raise UsageError(f"unknown shorthand flag: '{letter}' in {item}\n"
                             f"See 'docker {command} --help'.")
