"""The CLI reference page (docs/cli.md), generated from the parsers themselves: every subcommand of
`lightning-otel`, `agl-otel-collector` (and its `link`) and `lightning-otel-run`, every flag with its default and help.

    python -m lightning_otel.cli.reference > docs/cli.md     # tests/test_cli_reference.py: the page is this output
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

HEADER = """# Command-line reference

Every command and flag, as the parsers define them (generated: `python -m lightning_otel.cli.reference >
docs/cli.md`; a test fails when the page and the parsers differ). Start with [getting started](getting-started.md)
for what the main ones do end to end. `agl store` (Agent Lightning's spelling) takes `agl-otel-collector`'s flags,
with `--port` for its `--query-port`.
"""


def parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    """(program, parser) for each command installed with the package."""
    from lightning_otel.cli.main import build_parser
    from lightning_otel.cli.run import build_parser as run_parser
    from lightning_otel.collector.cli import link_parser, serve_parser

    return [("lightning-otel", build_parser()), ("agl-otel-collector", serve_parser()),
            ("agl-otel-collector link", link_parser()), ("lightning-otel-run", run_parser())]  # fmt: skip


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help_of(parser: argparse.ArgumentParser, name: str) -> str:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.dest == name:
                    return choice.help or ""
    return ""


def _spelling(action: argparse.Action) -> str:
    if not action.option_strings:
        return action.metavar if isinstance(action.metavar, str) else action.dest
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return names
    choices = "{" + ",".join(map(str, action.choices)) + "}" if action.choices else None
    metavar = action.metavar or choices or action.dest.upper()
    return f"{names} {metavar}"


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS) or action.required:
        return ""
    return f"`{action.default}`"


def _table(parser: argparse.ArgumentParser) -> Iterator[str]:
    for group in parser._action_groups:
        actions = [a for a in group._group_actions
                   if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]  # fmt: skip
        if not actions:
            continue
        if group.title not in ("positional arguments", "options"):
            yield f"\n*{group.title}*\n"
        yield "\n| flag | default | what |\n|---|---|---|"
        for action in actions:
            required = " (required)" if action.required else ""
            yield f"| `{_spelling(action)}`{required} | {_default(action)} | {_cell(action.help or '')} |"


def _section(program: str, parser: argparse.ArgumentParser, level: int) -> Iterator[str]:
    yield f"\n{'#' * level} `{program}`\n"
    if parser.description:
        yield _cell(parser.description)
    own = [action for action in parser._actions
           if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))]  # fmt: skip
    if own:
        yield from _table(parser)
    for name, sub in _subcommands(parser).items():
        yield f"\n{'#' * (level + 1)} `{program} {name}`\n"
        if about := _help_of(parser, name):
            yield _cell(about)
        yield from _table(sub)


def reference() -> str:
    lines = [HEADER]
    for program, parser in parsers():
        lines.extend(_section(program, parser, 2))
    return "\n".join(lines).rstrip() + "\n"


def every_flag() -> list[str]:
    """`program [subcommand] --flag` for every flag of every command (what the page must list)."""
    found = []
    for program, parser in parsers():
        for owner, sub in [(program, parser), *((f"{program} {n}", s) for n, s in _subcommands(parser).items())]:
            for action in sub._actions:
                for option in action.option_strings:
                    if option.startswith("--") and option != "--help":
                        found.append(f"{owner} {option}")
    return found


if __name__ == "__main__":
    print(reference(), end="")
