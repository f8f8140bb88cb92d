// The rollout view of agl-otel-collector: plain JavaScript over the collector's /v1/ui JSON routes.
// Pages (hash routes): #/ runs with reward charts; #/step/RUN/MODE/STEP a step's rollouts with the agent_match box;
// #/rollout/ID one rollout: attempts, span waterfall, LLM calls with trained tokens highlighted.
// Every text from the store goes through textContent (never innerHTML): span names and messages are user data.
"use strict";

const view = document.getElementById("view");
let token = new URLSearchParams(location.search).get("token") || sessionStorage.getItem("agl-token") || "";
if (token) sessionStorage.setItem("agl-token", token);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

class AuthNeeded extends Error {}

async function api(path) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const response = await fetch(path, { headers });
  if (response.status === 401) throw new AuthNeeded();
  const body = await response.json();
  if (!response.ok) throw new Error(body?.errors?.[0]?.msg || body?.error || `${response.status} ${path}`);
  return body;
}

const fmt = {
  reward: (value) => (value === null || value === undefined ? "—" : Number(value).toFixed(3)),
  time: (ns) => (ns ? new Date(ns / 1e6).toLocaleString() : "—"),
  ms: (ns) => `${(ns / 1e6).toFixed(ns < 1e7 ? 2 : 0)} ms`,
  enc: encodeURIComponent,
};

function statusCell(status) {
  return el("td", { class: `status-${status}`, text: status });
}

// --- runs ------------------------------------------------------------------------------------------------------
function rewardChart(steps) {
  const points = steps.filter((s) => s.reward_mean !== null);
  const width = 520, height = 160, pad = 32;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("data-testid", "reward-chart");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "mean reward per step");
  const add = (tag, attrs, text) => {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    svg.append(node);
    return node;
  };
  if (!points.length) {
    add("text", { x: pad, y: height / 2 }, "no rewards reported yet");
    return svg;
  }
  const values = points.map((p) => p.reward_mean);
  let low = Math.min(...values), high = Math.max(...values);
  if (high - low < 1e-9) { low -= 0.5; high += 0.5; }
  const lastStep = Math.max(...points.map((p) => p.step)), firstStep = Math.min(...points.map((p) => p.step));
  const x = (step) => pad + ((step - firstStep) / Math.max(1, lastStep - firstStep)) * (width - 2 * pad);
  const y = (value) => height - pad - ((value - low) / (high - low)) * (height - 2 * pad);
  add("line", { class: "axis", x1: pad, y1: height - pad, x2: width - pad, y2: height - pad });
  add("line", { class: "axis", x1: pad, y1: pad, x2: pad, y2: height - pad });
  add("text", { x: 2, y: y(high) + 4 }, high.toFixed(2));
  add("text", { x: 2, y: y(low) + 4 }, low.toFixed(2));
  add("text", { x: width / 2 - 30, y: height - 6 }, `step ${firstStep}–${lastStep}`);
  add("polyline", { class: "line", points: points.map((p) => `${x(p.step)},${y(p.reward_mean)}`).join(" ") });
  for (const p of points) {
    const dot = add("circle", { cx: x(p.step), cy: y(p.reward_mean), r: 3, "data-step": p.step,
                                "data-reward": p.reward_mean });
    const title = document.createElementNS("http://www.w3.org/2000/svg", "title");
    title.textContent = `step ${p.step}: mean reward ${fmt.reward(p.reward_mean)}`;
    dot.append(title);
  }
  return svg;
}

// A policy per agent: each policy's mean reward over its own samples, step by step, with what its update did.
function policyCurves(curves) {
  return el("section", { class: "policy-curves", "data-testid": "policy-curves" },
    ...Object.entries(curves).map(([policy, points]) => {
      const last = points[points.length - 1] || {};
      const skipped = points.filter((p) => p.skipped === 1).length;
      return el("div", { class: "policy-curve", "data-testid": "policy-curve", "data-policy": policy },
        el("h3", {}, "policy ", el("code", { text: policy })),
        el("p", { class: "muted", text: `${points.length} steps · last: ${last.samples ?? "—"} samples, ` +
          `mean |advantage| ${fmt.reward(last.advantage_abs_mean)}, grad norm ${fmt.reward(last.grad_norm)}` +
          (skipped ? ` · skipped in ${skipped} steps (nothing to learn)` : "") }),
        rewardChart(points));
    }));
}

async function showRuns() {
  const data = await api("/v1/ui/runs");
  const parts = [el("h1", { text: "Runs" })];
  if (!data.runs.length) {
    parts.push(el("p", { class: "muted", "data-testid": "no-runs",
      text: "No rollouts in this store yet: train (lightning-otel demo, Trainer.fit) against this collector." }));
  }
  for (const run of data.runs) {
    const train = run.steps.filter((s) => s.mode === "train");
    const rows = run.steps.map((s) =>
      el("tr", { "data-testid": "step-row" },
        el("td", {}, el("a", { href: `#/step/${fmt.enc(run.run_id)}/${s.mode}/${s.step}`, text: `${s.mode} ${s.step}` }),
           s.note ? el("div", { class: "muted", "data-testid": "step-note", text: s.note }) : null),
        el("td", { text: s.rollouts }),
        el("td", { text: Object.entries(s.statuses).map(([k, v]) => `${v} ${k}`).join(", ") }),
        el("td", { class: "reward", text: fmt.reward(s.reward_mean) }),
        el("td", { text: s.policy_versions.join(", ") || "—" }),
        el("td", { class: "muted", text: fmt.time(s.started_ns) })));
    parts.push(el("section", { class: "run", "data-testid": "run", "data-run-id": run.run_id },
      el("h2", {}, "run ", el("code", { text: run.run_id })),
      el("p", { class: "muted" }, `agent_match `, el("code", { text: JSON.stringify(run.agent_match) }),
         ` · ${run.rollouts} rollouts · started ${fmt.time(run.started_ns)}`,
         run.max_staleness ? ` · asynchronous (max_staleness ${run.max_staleness})` : ""),
      train.length ? rewardChart(train) : null,
      run.policy_curves ? policyCurves(run.policy_curves) : null,
      el("table", {}, el("tr", {}, ...["step", "rollouts", "status", "mean reward", "policy version", "started"]
        .map((h) => el("th", { text: h }))), rows)));
  }
  if (data.scanned >= data.limit) parts.push(el("p", { class: "muted", text: `showing the newest ${data.limit} rollouts` }));
  return parts;
}

// --- the agent_match box (the collector's adapter decides; nothing is re-implemented here) -------------------
function matchBox(current, runDefault, onApply) {
  // a policy per agent: the mapping as JSON, which the box also takes
  const shown = current !== null && typeof current === "object" ? JSON.stringify(current) : current ?? "";
  const input = el("input", { type: "text", value: shown, "data-testid": "agent-match-input",
                              "aria-label": "agent_match regular expression, or a JSON mapping to policies" });
  const error = el("span", { class: "error", "data-testid": "agent-match-error" });
  const form = el("form", { class: "match-box", "data-testid": "agent-match-box",
    onsubmit: async (event) => {
      event.preventDefault();
      error.textContent = "";
      try { await onApply(input.value); } catch (exc) { error.textContent = exc.message; }
    } },
    el("label", {}, "agent_match ", input), " ", el("button", { type: "submit", text: "apply" }), " ",
    el("span", { class: "muted" }, "the run's own: ", el("code", { text: JSON.stringify(runDefault) }),
       " · empty selects every call · the collector's adapter decides"), " ", error);
  return form;
}

function decisionCell(decision) {
  if (!decision) return el("span", { class: "muted", text: "—" });
  return el("span", { class: `decision ${decision.selected ? "selected" : "left-out"}`, "data-testid": "decision",
    "data-selected": String(decision.selected), "data-span-id": decision.span_id },
    `${decision.selected ? "✓" : "✗"} ${decision.agent ?? "(no agent)"}: ${decision.reason}`);
}

// --- a step ----------------------------------------------------------------------------------------------------
// The trainer's own metrics for training step N (its agl.training.step span): asynchronous training's first
// (staleness histogram, dropped and carried-over groups, gateway pause, runner idle share), then the rest.
function trainerMetrics(step, metrics) {
  const names = Object.keys(metrics).sort((a, b) =>
    (b.startsWith("async/") - a.startsWith("async/")) || a.localeCompare(b));
  const shown = (value) => Number.isInteger(value) ? String(value) : value.toFixed(3);
  return el("details", { class: "trainer-metrics", "data-testid": "trainer-metrics" },
    el("summary", { text: `the trainer's step ${step}: ${names.length} metrics` }),
    el("table", {}, ...names.map((name) => el("tr", { "data-metric": name },
      el("td", { class: "mono", text: name }), el("td", { text: shown(metrics[name]) })))));
}

async function showStep(runId, mode, step, agentMatch) {
  const query = agentMatch === undefined ? "" : `?agent_match=${fmt.enc(agentMatch)}`;
  const data = await api(`/v1/ui/runs/${fmt.enc(runId)}/${fmt.enc(mode)}/${fmt.enc(step)}${query}`);
  const rows = data.rollouts.map((r) =>
    el("tr", { "data-testid": "rollout-row", "data-rollout-id": r.rollout_id, "data-samples": r.samples },
      el("td", {}, el("a", { href: `#/rollout/${fmt.enc(r.rollout_id)}${query}`, class: "mono", text: r.rollout_id })),
      el("td", { text: r.task_id }), statusCell(r.status),
      el("td", { class: "reason", "data-testid": "cause", text: r.cause ?? "" }),
      el("td", { text: fmt.reward(r.reward) }), el("td", { text: r.attempts }),
      el("td", { class: "mono", text: r.runner_id ?? "—" }),
      el("td", { "data-testid": "versions", text: `${r.policy_version ?? "—"}${r.sampled_versions.length ? ` → ${r.sampled_versions.join(", ")}` : ""}` }),
      el("td", { text: r.agents.join(", ") || "—" }), el("td", { text: r.llm_calls }),
      el("td", { class: "samples", "data-testid": "trained", text: data.trainer_metrics ? `${r.samples} (${r.trained_samples} trained)` : r.samples }),
      el("td", {}, r.no_sample_reason ? el("div", { class: "reason", text: r.no_sample_reason }) : null,
         ...r.calls.map((d) => el("div", {}, decisionCell(d),
           d.credit ? el("span", { class: "muted", "data-testid": "step-credit", text: ` · A ${d.credit.advantage.toFixed(3)}${d.credit.estimator === "anchor" ? ` (A_step ${d.credit.step_advantage.toFixed(3)}, state of ${d.credit.anchor_size})` : ""}` }) : null)))));
  return [
    el("p", {}, el("a", { href: "#/", text: "runs" }), " / ", el("code", { text: runId })),
    el("h1", { text: `${mode} step ${step}` }),
    el("p", { class: "muted", text: `${data.step.rollouts} rollouts · mean reward ${fmt.reward(data.step.reward_mean)} · policy version ${data.step.policy_versions.join(", ") || "—"}` }),
    data.max_staleness ? el("p", { class: "muted", "data-testid": "async-note", text: `asynchronous training (max_staleness ${data.max_staleness}): rollouts queued under one version may be sampled by newer ones; rollouts sampled by: ${Object.entries(data.sampled_versions).map(([v, n]) => `v${v} ×${n}`).join(", ") || "—"}` }) : null,
    data.step.note ? el("p", { "data-testid": "step-note", text: data.step.note }) : null,
    ...Object.entries(data.prompts || {}).map(([version, templates]) =>
      el("details", { class: "prompts", "data-testid": "prompt", "data-version": version, open: "" },
        el("summary", { text: `the prompt these rollouts ran with (resources version ${version})` }),
        ...Object.entries(templates).map(([name, text]) =>
          el("div", {}, el("code", { text: name }), el("pre", { text }))))),
    matchBox(data.agent_match, data.run_agent_match, async (value) => {
      const hash = `#/step/${fmt.enc(runId)}/${mode}/${step}?agent_match=${fmt.enc(value)}`;
      await api(`/v1/ui/runs/${fmt.enc(runId)}/${fmt.enc(mode)}/${fmt.enc(step)}?agent_match=${fmt.enc(value)}`);
      go(hash);  // checked first: a bad regex is said beside the box, the page stays
    }),
    el("table", { "data-testid": "rollouts" },
      el("tr", {}, ...["rollout", "task", "status", "cause", "reward", "attempts", "runner", "policy (queued → sampled)", "agents", "LLM calls",
                       "samples", "each call: selected? why"].map((h) => el("th", { text: h }))), rows),
    data.trainer_metrics ? trainerMetrics(step, data.trainer_metrics) : null,  // what the step did first, then these
  ];
}

// --- a rollout -------------------------------------------------------------------------------------------------
function spanKind(span) {
  const op = span.attributes["gen_ai.operation.name"];
  if (op === "chat" || op === "text_completion") return "llm";
  if (op === "invoke_agent") return "agent";
  if (op === "execute_tool") return "tool";
  if (span.name === "agl.reward") return "reward";
  return "other";
}

function waterfall(spans) {
  if (!spans.length) return el("p", { class: "muted", text: "no spans stored for this attempt" });
  const byId = new Map(spans.map((s) => [s.spanId, s]));
  const children = new Map();
  const roots = [];
  for (const span of spans) {
    if (span.parentSpanId && byId.has(span.parentSpanId)) {
      if (!children.has(span.parentSpanId)) children.set(span.parentSpanId, []);
      children.get(span.parentSpanId).push(span);
    } else roots.push(span);
  }
  const start = Math.min(...spans.map((s) => s.startTimeUnixNano));
  const end = Math.max(...spans.map((s) => s.endTimeUnixNano || s.startTimeUnixNano));
  const total = Math.max(1, end - start);
  const rows = [];
  const walk = (span, depth) => {
    const kind = spanKind(span);
    const duration = (span.endTimeUnixNano || span.startTimeUnixNano) - span.startTimeUnixNano;
    const reward = span.attributes["agl.reward.value"];
    const agent = span.attributes["gen_ai.agent.name"];
    const rewardName = span.attributes["agl.reward.name"], source = span.attributes["agl.reward.source"];
    const rewardText = kind === "reward" ? ` ${rewardName ?? ""} = ${fmt.reward(reward)}${source ? ` (from ${source})` : ""}` : "";
    const label = `${span.name}${rewardText}${kind === "llm" && agent ? `  [${agent}]` : ""}`;
    const bar = el("div", { class: `bar kind-${kind}`,
      style: `left:${((span.startTimeUnixNano - start) / total) * 100}%;width:${(duration / total) * 100}%` });
    rows.push(el("div", { class: "row", "data-testid": "span-row", "data-kind": kind, "data-span-id": span.spanId,
                          title: `${span.service} · ${span.name} · ${fmt.ms(duration)}` },
      el("div", { class: "label", style: `padding-left:${depth * 1.1}em`, text: label }),
      el("div", { class: "track" }, bar), el("div", { class: "muted", text: fmt.ms(duration) })));
    if (span.logs && span.logs.length) rows.push(logRecords(span.logs, depth + 1));
    for (const child of children.get(span.spanId) || []) walk(child, depth + 1);
  };
  roots.forEach((root) => walk(root, 0));
  return el("div", { class: "waterfall", "data-testid": "waterfall" }, rows);
}

function logRecords(logs, depth = 0) {
  // OTLP log records (a harness's events, a framework's operation details), under their span or apart
  const line = (log) => el("div", { class: "log", "data-testid": "log-record" },
    el("code", { text: log.name ?? log.eventName ?? "log" }), log.severityText ? ` [${log.severityText}] ` : " ",
    el("span", { class: "muted", text: JSON.stringify(log.body !== undefined && log.body !== null && typeof log.body !== "object"
      ? { body: log.body, ...log.attributes } : log.attributes) }));
  return el("details", { class: "logs", "data-testid": "span-logs", style: `padding-left:${depth * 1.1}em` },
    el("summary", { text: `${logs.length} log record${logs.length === 1 ? "" : "s"}` }), ...logs.map(line));
}

function tokens(call) {
  const trained = Boolean(call.decision?.selected);
  const prompt = call.prompt_pieces ?? call.prompt_token_ids.map((id) => `⟨${id}⟩`);
  const response = call.response_pieces ?? call.response_token_ids.map((id) => `⟨${id}⟩`);
  const promptSpans = prompt.map((piece, i) =>
    el("span", { class: "tok prompt", title: `prompt token ${call.prompt_token_ids[i]}`, text: piece }));
  const responseSpans = response.map((piece, i) => {
    const logprob = call.response_logprobs[i];
    // on-policy distillation: the teacher's logprob of the token; a token it finds far less likely is marked
    const teacher = call.teacher_logprobs?.[i];
    const gap = teacher === undefined || logprob === undefined ? undefined : teacher - logprob;
    const scored = teacher === undefined ? "" : ` · teacher ${teacher.toFixed(4)} (${gap >= 0 ? "+" : ""}${gap?.toFixed(2)})`;
    return el("span", { class: `tok response${trained ? " trained" : ""}${gap !== undefined && gap < -1 ? " disagree" : ""}`,
      "data-testid": "response-token", "data-token-id": call.response_token_ids[i], "data-trained": String(trained),
      ...(teacher === undefined ? {} : { "data-teacher-logprob": String(teacher) }),
      title: `token ${call.response_token_ids[i]} · logprob ${logprob === undefined ? "—" : logprob.toFixed(4)}${scored}`,
      text: piece });
  });
  return el("div", { class: "tokens", "data-testid": "tokens" }, promptSpans, responseSpans);
}

function creditLine(credit) {
  // the call's return and advantage parts as the run computed them (A = A_rollout + step weight x A_step)
  if (!credit) return null;
  const num = (value) => (value >= 0 ? "+" : "") + value.toFixed(3);
  const others = credit.anchor_members.filter((m) => m.span_id !== credit.self_span_id);
  const group = credit.estimator === "anchor"
    ? [` · anchor state ${credit.anchor} (${credit.anchor_size} call${credit.anchor_size === 1 ? "" : "s"}${credit.anchor_key ? `; the run normalised states with ${credit.anchor_key}, shown here by exact tokens` : ""})`,
       ...others.slice(0, 12).map((m) => [" ", el("a", { href: `#/rollout/${fmt.enc(m.rollout_id)}`, "data-testid": "anchor-member", title: `call ${m.span_id}`, text: m.rollout_id.slice(-6) })]),
       others.length > 12 ? ` … ${others.length - 12} more` : ""]
    : [" · outcome-only GRPO: every call of the rollout gets its advantage"];
  return el("p", { class: "credit", "data-testid": "credit", "data-advantage": String(credit.advantage) },
    `return ${credit.return.toFixed(3)} · advantage ${num(credit.advantage)} = A_rollout ${num(credit.rollout_advantage)}`,
    credit.estimator === "anchor" ? ` + ${credit.step_weight} × A_step ${num(credit.step_advantage)}` : "", ...group.flat());
}

function messages(call) {
  if (!call.input_messages && !call.output_messages) return null;
  const text = (value) => (typeof value === "string" ? value : JSON.stringify(value, null, 1));
  return el("details", {}, el("summary", { text: "messages (content was captured)" }),
    call.input_messages ? el("div", { class: "messages", text: text(call.input_messages) }) : null,
    call.output_messages ? el("div", { class: "messages", text: text(call.output_messages) }) : null);
}

async function showRollout(rolloutId, agentMatch, attemptId) {
  const params = new URLSearchParams();
  if (agentMatch !== undefined) params.set("agent_match", agentMatch);
  if (attemptId) params.set("attempt_id", attemptId);
  const query = params.toString() ? `?${params}` : "";
  const data = await api(`/v1/ui/rollouts/${fmt.enc(rolloutId)}${query}`);
  const rollout = data.rollout;
  const back = data.run_id
    ? [el("a", { href: "#/", text: "runs" }), " / ", el("a", { href: `#/step/${fmt.enc(data.run_id)}/${rollout.mode}/${data.step}`, text: `${rollout.mode} step ${data.step}` })]
    : [el("a", { href: "#/", text: "runs" })];
  const attempts = data.attempts.map((a) =>
    el("tr", {}, el("td", {}, el("a", { href: `#/rollout/${fmt.enc(rolloutId)}?attempt_id=${fmt.enc(a.attempt_id)}`, class: "mono", text: a.attempt_id })),
      statusCell(a.status), el("td", { class: "mono", text: a.runner_id }), el("td", { text: a.resources_version ?? "—" }),
      el("td", { text: fmt.reward(a.reward) }), el("td", { class: "reason", "data-testid": "attempt-cause", text: a.cause ?? "" }),
      el("td", { class: "reason", text: a.error ?? "" })));
  const calls = data.calls.map((call, index) =>
    el("section", { class: "call", "data-testid": "llm-call", "data-span-id": call.span_id,
                    "data-selected": String(Boolean(call.decision?.selected)) },
      el("h3", {}, `call ${index + 1}: `, el("code", { text: call.name }), ` · agent ${call.agent ?? "(none)"}${call.policy ? ` · policy ${call.policy}` : ""} · policy version ${call.policy_version ?? "—"}`),
      el("p", {}, decisionCell(call.decision)),
      creditLine(call.credit && { ...call.credit, self_span_id: call.span_id }),
      el("p", { class: "muted", text: `${call.prompt_token_ids.length} prompt + ${call.response_token_ids.length} response tokens · token ids complete: ${call.token_ids_complete ?? "—"} · service ${call.service} · response id ${call.response_id ?? "—"}${call.decision?.sample !== null && call.decision?.sample !== undefined ? ` · sample #${call.decision.sample}` : ""}` }),
      call.copies.length ? el("p", { class: "muted", "data-testid": "call-copies" }, "also recorded by ",
        ...call.copies.map((c) => el("code", { text: `${c.service ?? "?"} (span ${c.span_id})` })),
        ": the same call; this card is the copy the adapter used") : null,
      messages(call), call.prompt_token_ids.length || call.response_token_ids.length ? tokens(call)
        : el("p", { class: "muted", text: "no token ids on this span" })));
  return [
    el("p", {}, ...back),
    el("h1", {}, "rollout ", el("code", { "data-testid": "rollout-id", text: rollout.rollout_id })),
    el("p", {}, el("span", { class: `status-${rollout.status}`, "data-testid": "rollout-status", text: rollout.status }),
      ` · reward ${fmt.reward(rollout.reward)} · task ${rollout.task_id} · attempt shown `, el("code", { text: data.attempt_id ?? "—" }),
      ` · ${data.samples.length} sample(s)`, data.tokenizer ? ` · tokens decoded with ${data.tokenizer}` : " · token ids shown as ⟨id⟩ (start the collector with --tokenizer to decode)"),
    data.no_sample_reason ? el("div", { class: "banner", "data-testid": "no-sample-reason" }, el("strong", { text: "No training sample: " }), data.no_sample_reason) : null,
    data.links.length ? el("p", {}, "open in ", ...data.links.map((l) => [el("a", { href: l.url, target: "_blank", rel: "noopener", "data-testid": `link-${l.ui.toLowerCase()}`, text: `${l.ui} (${l.trace_id.slice(0, 8)}…)` }), " "])) : null,
    el("h2", { text: "attempts" }),
    el("table", {}, el("tr", {}, ...["attempt", "status", "runner", "resources version", "reward", "cause", "error"].map((h) => el("th", { text: h }))), attempts),
    el("h2", { text: "span tree" }), waterfall(data.spans),
    data.logs.length ? [el("h2", { text: "log records without a span" }), logRecords(data.logs)] : null,
    el("h2", { text: "LLM calls" }),
    matchBox(data.agent_match, data.run_agent_match, async (value) => {
      const more = attemptId ? `&attempt_id=${fmt.enc(attemptId)}` : "";
      await api(`/v1/ui/rollouts/${fmt.enc(rolloutId)}?agent_match=${fmt.enc(value)}${more}`);
      go(`#/rollout/${fmt.enc(rolloutId)}?agent_match=${fmt.enc(value)}${more}`);  // a bad regex: said beside the box
    }),
    el("p", { class: "muted" }, "highlighted: the response tokens trained (", el("span", { class: "tok trained", text: "like this" }),
       "); grey: the prompt; hover a token for its id and logprob",
       data.calls.some((c) => c.teacher_logprobs) ? ["; with on-policy distillation, the teacher's too, and ", el("span", { class: "tok disagree", text: "underlined" }),
         " where it finds the token far less likely (its logprob lower by more than 1)"] : ""),
    calls.length ? calls : el("p", { class: "muted", text: "this attempt recorded no LLM call" }),
  ];
}

// --- routing ---------------------------------------------------------------------------------------------------
function go(hash) {
  if (location.hash === hash) render();
  else location.hash = hash;
}

function parseHash() {
  const [path, query = ""] = location.hash.replace(/^#/, "").split("?");
  const params = new URLSearchParams(query);
  const agentMatch = params.has("agent_match") ? params.get("agent_match") : undefined;
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { parts, agentMatch, attemptId: params.get("attempt_id") || undefined };
}

async function showConfig() {
  try {
    const config = await api("/v1/ui/config");
    const links = [];
    if (config.jaeger_ui_url) links.push(el("a", { href: config.jaeger_ui_url, text: "Jaeger" }));
    if (config.phoenix_ui_url) links.push(el("a", { href: config.phoenix_ui_url, text: "Phoenix" }));
    document.getElementById("links-config").replaceChildren(...links.flatMap((l) => [l, " "]));
  } catch (_) { /* the page works without it */ }
}

async function pageWithout(parts, attemptId) {
  try {
    if (parts[0] === "step" && parts.length === 4) return (await showStep(parts[1], parts[2], parts[3])).flat().filter(Boolean);
    if (parts[0] === "rollout" && parts.length === 2) return (await showRollout(parts[1], undefined, attemptId)).flat().filter(Boolean);
  } catch (_) { /* not the agent_match's fault: the error is shown */ }
  return null;
}

async function render() {
  const { parts, agentMatch, attemptId } = parseHash();
  view.replaceChildren(el("p", { class: "muted", text: "loading…" }));
  try {
    let content;
    if (parts[0] === "step" && parts.length === 4) content = await showStep(parts[1], parts[2], parts[3], agentMatch);
    else if (parts[0] === "rollout" && parts.length === 2) content = await showRollout(parts[1], agentMatch, attemptId);
    else content = await showRuns();
    view.replaceChildren(...content.flat().filter(Boolean));
    view.dataset.ready = location.hash || "#/";
  } catch (exc) {
    if (exc instanceof AuthNeeded) {
      const form = document.getElementById("token-form").content.cloneNode(true).firstElementChild;
      form.addEventListener("submit", (event) => {
        event.preventDefault();
        token = form.elements.token.value;
        sessionStorage.setItem("agl-token", token);
        showConfig();
        render();
      });
      view.replaceChildren(form);
      return;
    }
    const page = agentMatch === undefined ? null : await pageWithout(parts, attemptId);
    if (page) {  // a link with a bad agent_match: the page as the run selects, the error beside the box
      view.replaceChildren(...page);
      view.querySelector("[data-testid=agent-match-error]").textContent = exc.message;
    } else {
      view.replaceChildren(el("p", { class: "reason", "data-testid": "error", text: `error: ${exc.message}` }));
    }
    view.dataset.ready = location.hash || "#/";
  }
}

window.addEventListener("hashchange", render);
showConfig();
render();
