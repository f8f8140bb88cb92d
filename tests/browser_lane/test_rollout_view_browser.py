"""The rollout view in a real browser: headless Debian Chromium driven by Playwright over a real recorded training
run, each page checked against what the adapter returns for the same rollouts. Screenshots go to
$AGL_SCREENSHOT_DIR (default: the test's temporary folder). Runs in its own environment: `nox -s browser`."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from lightning_otel.adapters.triplets import TraceToTriplet
from lightning_otel.testing.replies import logprob
from lightning_otel.training.loop.step_spans import step_spans
from tests.programs import recorded_run

CHROMIUM = os.environ.get("AGL_CHROMIUM", "/usr/bin/chromium")
# Headless, and no background connections: this machine's network is closed (they would fail by the dozen).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
TOKEN = "ui-token"

if not os.path.exists(CHROMIUM):  # never a quiet skip (a lane of no test exits 5): the install line instead
    raise RuntimeError(f"the browser lane needs Chromium at {CHROMIUM}: run `bash .ci/prerequisites` "
                       "(apt-get install chromium)")  # fmt: skip


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = Path(os.environ.get("AGL_SCREENSHOT_DIR") or tmp_path_factory.mktemp("screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with recorded_run.served(tmp_path_factory.mktemp("recorded"), TOKEN) as served:
        (run,) = served["http"].get("/v1/ui/runs").json()["runs"]
        yield {**served, "run": run}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def open_view(page: Page, recorded: dict[str, Any], hash_: str) -> None:
    page.goto(f"{recorded['url']}/ui?token={TOKEN}{hash_}")
    page.wait_for_selector(f"main[data-ready='{hash_}']")


def test_without_the_token_the_page_asks_for_it_then_shows_the_runs(page: Page, recorded: dict[str, Any]) -> None:
    page.goto(f"{recorded['url']}/ui")
    form = page.get_by_test_id("token-form")
    expect(form).to_be_visible()
    form.locator("input[name=token]").fill(TOKEN)
    form.get_by_role("button").click()
    expect(page.get_by_test_id("run")).to_have_count(1)


def test_runs_page_lists_steps_and_draws_the_reward_per_step(page: Page, recorded: dict[str, Any], shots: Path) -> None:
    open_view(page, recorded, "#/")
    run = recorded["run"]
    expect(page.get_by_test_id("step-row")).to_have_count(len(run["steps"]))
    dots = page.get_by_test_id("reward-chart").locator("circle")
    train = [s for s in run["steps"] if s["mode"] == "train"]
    expect(dots).to_have_count(len(train))
    for dot, step in zip(dots.all(), train, strict=True):
        assert float(dot.get_attribute("data-reward")) == pytest.approx(step["reward_mean"])
    page.screenshot(path=shots / "runs.png", full_page=True)


def test_step_page_and_the_agent_match_box_agree_with_the_adapter(
    page: Page, recorded: dict[str, Any], shots: Path
) -> None:
    run_id = recorded["run"]["run_id"]
    # the trainer's own span for the step, as a training loop sends it (the recorded run is a Baseline: none)
    with step_spans(SimpleNamespace(client=recorded["client"], run_id=run_id)) as record_step:
        record_step(1, {"training/loss": 0.5, "rollout/reward": 0.25}, time.time_ns())
    open_view(page, recorded, f"#/step/{run_id}/train/1")
    rows = page.get_by_test_id("rollout-row")
    expect(rows).to_have_count(10)
    # what the step did leads; the trainer's numbers are folded below the rollouts
    metrics = page.get_by_test_id("trainer-metrics")
    expect(metrics).to_contain_text("the trainer's step 1: 2 metrics")
    assert metrics.get_attribute("open") is None
    assert page.evaluate(
        "() => Boolean(document.querySelector('[data-testid=rollouts]').compareDocumentPosition("
        "document.querySelector('[data-testid=trainer-metrics]')) & Node.DOCUMENT_POSITION_FOLLOWING)"
    )

    def check(agent_match: str) -> None:
        adapter = TraceToTriplet(agent_match=agent_match)
        for row in rows.all():
            rollout_id = row.get_attribute("data-rollout-id")
            record = recorded["http"].get(f"/v1/ui/rollouts/{rollout_id}").json()["rollout"]
            if record["status"] != "succeeded":
                expect(row).to_contain_text("ended failed")
                continue
            adapted = adapter.adapt(recorded["client"].rollout_spans(rollout_id, attempt_id=record["attempt_id"]))
            assert int(row.get_attribute("data-samples")) == len(adapted.triplets)
            shown = {d.get_attribute("data-span-id"): d.get_attribute("data-selected")
                     for d in row.get_by_test_id("decision").all()}  # fmt: skip
            assert shown == {d.span_id: str(d.selected).lower() for d in adapted.diagnostics.calls}

    check("write")
    box = page.get_by_test_id("agent-match-box")
    box.get_by_test_id("agent-match-input").fill("^check$")
    box.get_by_role("button").click()
    page.wait_for_selector("main[data-ready*='agent_match=%5Echeck%24']")
    check("^check$")
    selected = page.locator("[data-testid=decision][data-selected=true]")
    expect(selected.first).to_contain_text("check: trained: agent_match '^check$' finds the call's agent 'check'")
    page.screenshot(path=shots / "step_agent_match.png", full_page=True)
    box = page.get_by_test_id("agent-match-box")
    box.get_by_test_id("agent-match-input").fill("(unclosed")
    box.get_by_role("button").click()
    # said beside the box; the page (the last good selection's) stays
    expect(box.get_by_test_id("agent-match-error")).to_contain_text("not a valid regular expression")
    expect(rows).to_have_count(10)
    check("^check$")
    open_view(page, recorded, f"#/step/{run_id}/train/1?agent_match=(unclosed")  # a link with a bad one
    expect(page.get_by_test_id("agent-match-error")).to_contain_text("not a valid regular expression")
    expect(rows).to_have_count(10)
    check("write")  # the run's own selection meanwhile


def test_rollout_page_shows_the_waterfall_and_highlights_the_trained_tokens(
    page: Page, recorded: dict[str, Any], shots: Path
) -> None:
    run_id = recorded["run"]["run_id"]
    rows = recorded["http"].get(f"/v1/ui/runs/{run_id}/train/2").json()["rollouts"]
    rollout_id = next(r["rollout_id"] for r in rows if r["task_id"] == "customers-2024")
    view = recorded["http"].get(f"/v1/ui/rollouts/{rollout_id}").json()
    open_view(page, recorded, f"#/rollout/{rollout_id}")
    expect(page.get_by_test_id("rollout-id")).to_have_text(rollout_id)
    expect(page.get_by_test_id("agent-match-box")).to_contain_text('the run\'s own: "write"')
    expect(page.get_by_test_id("span-row")).to_have_count(len(view["spans"]))
    expect(page.locator("[data-testid=span-row][data-kind=llm]")).to_have_count(3)
    calls = page.get_by_test_id("llm-call")
    expect(calls).to_have_count(3)
    adapted = TraceToTriplet(agent_match="write").adapt(recorded["client"].rollout_spans(rollout_id))
    trained = {span_id for triplet in adapted.triplets for span_id in triplet.span_ids}
    for call in calls.all():
        span_id = call.get_attribute("data-span-id")
        served = recorded["served"][next(c for c in view["calls"] if c["span_id"] == span_id)["response_id"]]
        tokens = call.get_by_test_id("response-token")
        ids = [int(t.get_attribute("data-token-id")) for t in tokens.all()]
        assert ids == served.response_token_ids[0]  # the server's ids, in order
        flags = {t.get_attribute("data-trained") for t in tokens.all()}
        assert flags == {"true" if span_id in trained else "false"}
        assert call.locator(".tok.trained").count() == (len(ids) if span_id in trained else 0)  # highlighted
        title = tokens.first.get_attribute("title")
        assert title == f"token {ids[0]} · logprob {logprob(ids[0], 0):.4f}"  # the server's logprob, on hover
    hrefs = [a.get_attribute("href") for a in page.get_by_test_id("link-jaeger").all()]
    assert hrefs and all(h.startswith(f"{recorded_run.JAEGER_UI}/trace/") for h in hrefs)
    # each trained call says its return and advantages, and links the other calls of its anchor state
    for call in calls.all():
        span_id = call.get_attribute("data-span-id")
        credit = next(c for c in view["calls"] if c["span_id"] == span_id)["credit"]
        line = call.get_by_test_id("credit")
        if span_id not in trained:
            expect(line).to_have_count(0)
            continue
        expect(line).to_contain_text(f"return {credit['return']:.3f}")
        step = f"{credit['step_advantage']:+.3f}"
        expect(line).to_contain_text(f"A_step {'+0.000' if float(step) == 0 else step}")  # the page writes 0 as +0
        expect(line).to_contain_text(f"anchor state {credit['anchor']} ({credit['anchor_size']} calls")
        others = [m["rollout_id"] for m in credit["anchor_members"] if m["span_id"] != span_id]
        links = line.get_by_test_id("anchor-member")
        expect(links).to_have_count(len(others))
        assert [a.get_attribute("href") for a in links.all()] == [f"#/rollout/{r}" for r in others]
    page.screenshot(path=shots / "rollout.png", full_page=True)
    if os.environ.get("AGL_UPDATE_SCREENSHOT"):  # the README's picture is this page, as this test renders it
        shutil.copy(shots / "rollout.png", Path(__file__).resolve().parents[2] / "docs" / "rollout_view.png")


def test_a_rollout_without_a_sample_says_why(page: Page, recorded: dict[str, Any], shots: Path) -> None:
    run_id = recorded["run"]["run_id"]
    rows = recorded["http"].get(f"/v1/ui/runs/{run_id}/train/1").json()["rollouts"]
    failed = next(r["rollout_id"] for r in rows if r["status"] == "failed")
    open_view(page, recorded, f"#/rollout/{failed}")
    expect(page.get_by_test_id("no-sample-reason")).to_contain_text("the rollout ended failed after 2 attempt(s)")
    expect(page.get_by_test_id("no-sample-reason")).to_contain_text("RuntimeError: the agent raised on purpose")
    page.screenshot(path=shots / "rollout_failed.png", full_page=True)
    succeeded = next(r["rollout_id"] for r in rows if r["status"] == "succeeded")
    open_view(page, recorded, f"#/rollout/{succeeded}?agent_match=nobody")
    expect(page.get_by_test_id("no-sample-reason")).to_contain_text("agent_match='nobody' selected none of its")
    expect(page.locator("[data-testid=response-token][data-trained=true]")).to_have_count(0)


def test_a_run_with_a_policy_per_agent_draws_each_policys_curve(page: Page, recorded: dict[str, Any]) -> None:
    # The run page as the collector answers it for a run whose agent_match maps agents to policies (the curves'
    # numbers come from the trainer's step spans: tests/tinker/test_policy_per_agent.py checks that path).
    runs = recorded["http"].get("/v1/ui/runs").json()
    curves = {
        "planner": [{"step": 1, "reward_mean": 0.2, "samples": 8, "advantage_abs_mean": 0.1, "grad_norm": 0.5,
                     "skipped": 0}, {"step": 2, "reward_mean": 0.4, "samples": 8, "advantage_abs_mean": 0.1,
                                     "grad_norm": 0.4, "skipped": 0}],
        "caller": [{"step": 1, "reward_mean": 0.3, "samples": 0, "advantage_abs_mean": None, "grad_norm": None,
                    "skipped": 1}, {"step": 2, "reward_mean": 0.5, "samples": 8, "advantage_abs_mean": 0.2,
                                    "grad_norm": 0.3, "skipped": 0}],
    }  # fmt: skip
    runs["runs"][0].update(agent_match={"^planner$": "planner", "^caller$": "caller"}, policy_curves=curves)
    page.route("**/v1/ui/runs", lambda route: route.fulfill(json=runs))
    open_view(page, recorded, "#/")
    drawn = page.get_by_test_id("policy-curve")
    expect(drawn).to_have_count(2)
    for policy, points in curves.items():
        curve = page.locator(f"[data-testid=policy-curve][data-policy={policy}]")
        rewards = [float(dot.get_attribute("data-reward")) for dot in curve.locator("circle").all()]
        assert rewards == [point["reward_mean"] for point in points]
    expect(page.locator("[data-policy=caller]")).to_contain_text("skipped in 1 steps")
