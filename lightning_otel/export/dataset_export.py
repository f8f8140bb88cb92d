"""`export_dataset`: a store's rollouts as a training dataset (`lightning-otel export` is this on the command line).

    import lightning_otel as agl
    report = agl.export_dataset("agl-demo/collector.sqlite3", "pairs.parquet", shape="pairs")
    report = agl.export_dataset(agl.Client("http://127.0.0.1:16686"), "sft.jsonl", run_id="...", min_reward=1.0)

The source is a store (a SQLite file's path, `sqlite:///ABSOLUTE/PATH`, `postgresql://...`: read through a collector
started on loopback for the export) or a running collector (its URL, or a `Client`). Rollouts are read a page at a time
(the queue's keyset paging, then each page's spans in one request) and rows are written as they are made, so memory
stays flat however large the store. Selection: `status` (default succeeded), `run_id`, `step`, `mode`,
`min_reward` (sft/rollouts: the rollout's reward; pairs: the chosen side's), `agent_match` (default: the one each
rollout's run trained with; None: every call). The report says what was read, what was left out and why; a rollout
whose spans are incomplete (a parent span missing) is exported as stored and counted.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning_otel.adapters.triplets import TraceToTriplet
from lightning_otel.collector.client import Client
from lightning_otel.collector.stores.stores import existing_store_url
from lightning_otel.export.atif import rollout_trajectory
from lightning_otel.export.rollouts import AGENT_MATCH_OF_RUN, ExportedRollout, exported_rollout
from lightning_otel.export.shapes import SHAPES, PairCounts, PairRule, preference_pairs, rollout_row, sft_rows
from lightning_otel.export.writers import format_of, open_writer

PAGE_SIZE = 200


@dataclass(slots=True)
class ExportReport:
    shape: str
    format: str
    out: Path
    rollouts_scanned: int = 0  # rollouts of the asked status the store holds
    rollouts_exported: int = 0  # those the selection kept
    left_out: dict[str, int] = field(default_factory=dict)  # why the others were not: reason -> count
    incomplete_rollouts: int = 0  # exported, but a parent span was missing in the store
    rows: int = 0
    calls: int = 0  # LLM calls in the exported rollouts
    selected_calls: int = 0
    calls_without_token_ids: int = 0  # selected ones
    calls_without_content: int = 0  # selected ones: no messages recorded (capture_content was off)
    pairs: PairCounts | None = None
    seconds: float = 0.0

    def summary(self) -> str:
        written = f"-> {self.out} ({self.format})" if self.rows else f"(nothing written to {self.out})"
        lines = [
            f"{self.rows} {self.shape} rows {written} in {self.seconds:.1f} s",
            f"  rollouts: {self.rollouts_scanned} read, {self.rollouts_exported} selected"
            + "".join(f", {count} {why}" for why, count in sorted(self.left_out.items())),
            f"  calls: {self.calls} in those rollouts, {self.selected_calls} selected by agent_match, "
            f"{self.calls_without_token_ids} of them without token ids, {self.calls_without_content} without "
            "message content",
        ]
        if self.pairs is not None:
            lines.append(
                f"  pairs: {self.pairs.rollout_pairs} rollout pairs -> {self.pairs.pairs} call pairs "
                f"({self.pairs.prompts_differ} calls with different prompts, {self.pairs.identical_replies} "
                "identical replies left out)"
            )
        if self.incomplete_rollouts:
            lines.append(f"  warning: {self.incomplete_rollouts} rollouts have spans whose parent is not stored")
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class _Selection:
    run_id: str | None
    step: int | None
    mode: str | None
    min_reward: float | None  # applied to rollouts (sft, rollouts); pairs apply it to the chosen side

    def why_not(self, record: dict[str, Any]) -> str | None:
        metadata = record.get("metadata") or {}
        if record.get("attempt_id") is None:
            return "never ran"
        if self.run_id is not None and metadata.get("run_id") != self.run_id:
            return "in other runs"
        if self.step is not None and metadata.get("step") != self.step:
            return "at other steps"
        if self.mode is not None and record.get("mode") != self.mode:
            return "in other modes"
        return None


@contextlib.contextmanager
def store_client(source: str | Path | Client, auth_token: str | None, *, create: bool = False) -> Iterator[Client]:
    """A client of `source`: a running collector (its URL, or a `Client`) or a store, read (and written) through a
    collector started on loopback for the purpose. `create`: a SQLite path that does not exist yet becomes a new
    store (an import's target)."""
    if isinstance(source, Client):
        yield source
        return
    source = str(source)
    if source.startswith(("http://", "https://")):
        with Client(source, auth_token=auth_token) as client:
            yield client
        return
    from lightning_otel.collector.server import CollectorConfig, EmbeddedCollector

    if create and "://" not in source and not Path(source).expanduser().exists():
        path = Path(source).expanduser().resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{path}"
    else:
        url = existing_store_url(source)
    if url.startswith("sqlite:"):  # one pass over the store: a small page cache keeps memory flat however large it is
        url += ("&" if "?" in url else "?") + "cache_mib=2"
    config = CollectorConfig(http_port=0, grpc_port=None, query_port=0, store_url=url)
    collector = EmbeddedCollector(config)
    addresses = collector.start()
    try:
        with Client(addresses.query) as client:
            yield client
    finally:
        collector.stop()


def _progress(total: int, enabled: bool) -> Any:
    """A rich progress bar on stderr (rollouts read of `total`), or a stand-in that draws nothing."""
    try:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
    except ImportError:
        enabled = False
    if not enabled or not sys.stderr.isatty():
        return contextlib.nullcontext(None)
    return Progress(
        TextColumn("exporting"), BarColumn(), MofNCompleteColumn(), TextColumn("rollouts"), TimeRemainingColumn(),
        console=Console(file=sys.stderr), transient=True,
    )  # fmt: skip


def export_dataset(
    source: str | Path | Client,
    out: str | Path,
    *,
    shape: str = "sft",
    format: str | None = None,
    run_id: str | None = None,
    step: int | None = None,
    mode: str | None = None,
    status: str | None = "succeeded",
    min_reward: float | None = None,
    agent_match: str | None = AGENT_MATCH_OF_RUN,
    pair_rule: PairRule | None = None,
    auth_token: str | None = None,
    overwrite: bool = False,
    progress: bool = True,
    page_size: int = PAGE_SIZE,
) -> ExportReport:
    """Write `source`'s rollouts to `out` as `shape` ("sft", "pairs", "rollouts") in `format` ("jsonl", "parquet",
    "hf"; default from `out`'s suffix, a folder for "hf"). Returns what was written and what was left out."""
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {list(SHAPES)}, got {shape!r}")
    out = Path(out)
    chosen_format = format_of(out, format)
    if shape == "atif" and chosen_format != "jsonl":
        raise ValueError(
            f"shape 'atif' is written as JSON Lines (a trajectory a line): name the file *.jsonl, not {out}"
        )
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists (pass overwrite=True / --overwrite to replace it)")
    if agent_match is not None and agent_match is not AGENT_MATCH_OF_RUN:
        TraceToTriplet(agent_match=agent_match)  # a bad regex fails here, before anything is written
    rule = pair_rule or PairRule()
    if shape == "pairs" and min_reward is not None:
        rule = PairRule(rule.strategy, rule.margin, min_reward)
    selection = _Selection(run_id, step, mode, None if shape == "pairs" else min_reward)
    report = ExportReport(shape, chosen_format, out, pairs=PairCounts() if shape == "pairs" else None)
    # Rows go to a hidden name beside `out`, renamed when the export ends with rows: a failed run or one that wrote
    # no row leaves no file (and an existing one untouched), never a partial one.
    partial = out.with_name(f".{out.name}.partial")
    started = time.perf_counter()
    with store_client(source, auth_token) as client:
        counts = client.queue_stats(status)
        total = sum(int(count) for count in counts.values())
        if partial.exists():  # a killed export's
            _remove(partial)
        writer = open_writer(partial, chosen_format, shape)
        try:
            with _progress(total, progress) as bar:
                task = bar.add_task("export", total=total) if bar is not None else None
                group: list[ExportedRollout] = []
                for rollout in _rollouts(client, selection, report, status, agent_match, page_size, shape):
                    if bar is not None:
                        bar.update(task, completed=report.rollouts_scanned)
                    if shape == "pairs":
                        if group and rollout.group_id != group[0].group_id:
                            report.rows += _write_all(writer, preference_pairs(group, rule, report.pairs))
                            group = []
                        group.append(rollout)
                    elif shape == "sft":
                        report.rows += _write_all(writer, sft_rows(rollout))
                    elif shape == "atif":
                        writer.write(rollout_trajectory(rollout))
                        report.rows += 1
                    else:
                        writer.write(rollout_row(rollout))
                        report.rows += 1
                if group:
                    report.rows += _write_all(writer, preference_pairs(group, rule, report.pairs))
        except BaseException:
            _discard(writer, partial)
            raise
    if report.rows == 0:
        _discard(writer, partial)
    else:
        try:
            writer.close()
        except BaseException:
            _discard(writer, partial)
            raise
        if out.exists():  # overwrite=True: replaced only now that the new rows are all written
            _remove(out)
        partial.rename(out)
    report.seconds = time.perf_counter() - started
    return report


def _discard(writer: Any, partial: Path) -> None:
    with contextlib.suppress(Exception):  # what is being discarded need not close cleanly
        writer.close()
    if partial.exists():
        _remove(partial)


def _remove(path: Path) -> None:
    import shutil

    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()


def _write_all(writer: Any, rows: Iterator[dict[str, Any]]) -> int:
    written = 0
    for row in rows:
        writer.write(row)
        written += 1
    return written


def _rollouts(
    client: Client,
    selection: _Selection,
    report: ExportReport,
    status: str | None,
    agent_match: str | None,
    page_size: int,
    shape: str,
) -> Iterator[ExportedRollout]:
    """The selected rollouts, a page at a time (by group for pairs, so a group's rollouts arrive together)."""
    cursor: str | None = None
    while True:
        page = client.rollouts_page(order="group" if shape == "pairs" else "position", status=status,
                                    after=cursor, limit=page_size)  # fmt: skip
        records = page["rollouts"]
        report.rollouts_scanned += len(records)
        kept = []
        for record in records:
            why = selection.why_not(record)
            if why is None:
                kept.append(record)
            else:
                report.left_out[why] = report.left_out.get(why, 0) + 1
        if kept:
            read = client.complete_rollouts_spans(
                [r["rollout_id"] for r in kept], attempt_ids=[r["attempt_id"] for r in kept], wait_s=0
            )
            report.incomplete_rollouts += len(read.get("incomplete") or {})
            for record in kept:
                rollout = exported_rollout(record, read["rollouts"].get(record["rollout_id"], []), agent_match)
                floor = selection.min_reward
                if floor is not None and (rollout.reward is None or rollout.reward < floor):
                    report.left_out["below min_reward"] = report.left_out.get("below min_reward", 0) + 1
                    continue
                report.rollouts_exported += 1
                report.calls += len(rollout.calls)
                for call in rollout.selected_calls:
                    report.selected_calls += 1
                    report.calls_without_token_ids += call.response_token_ids is None
                    report.calls_without_content += call.output_message is None
                yield rollout
        cursor = page["next"]
        if cursor is None:
            return
