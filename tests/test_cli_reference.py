"""The CLI reference page (docs/cli.md) is what the parsers say: every subcommand and flag, with defaults and help."""

from __future__ import annotations

from pathlib import Path

from lightning_otel.cli.reference import every_flag, reference

PAGE = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def test_the_reference_page_is_the_parsers_own_words():
    assert PAGE.read_text(encoding="utf-8") == reference(), (
        "docs/cli.md differs from the parsers: run `.venv/bin/python -m lightning_otel.cli.reference > docs/cli.md`"
    )


def test_every_flag_of_every_subcommand_is_on_the_page():
    page = PAGE.read_text(encoding="utf-8")
    sections = {}
    current = None
    for line in page.splitlines():
        if line.startswith("#") and "`" in line:
            current = line.split("`")[1]
            sections[current] = ""
        elif current is not None:
            sections[current] += line + "\n"
    missing = [
        flag
        for flag in every_flag()
        if f"`{flag.rsplit(' ', 1)[1]}" not in sections.get(flag.rsplit(" ", 1)[0], "")
        and f", {flag.rsplit(' ', 1)[1]}" not in sections.get(flag.rsplit(" ", 1)[0], "")
    ]
    assert not missing, f"flags the page does not list: {missing}"
    assert "lightning-otel train --algorithm" in every_flag()
    assert "lightning-otel export-model --base" in every_flag()
