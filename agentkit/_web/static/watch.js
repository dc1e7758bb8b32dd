// Follows one run: its events arrive as Server-Sent Events (EventSource), each the JSON form of an event
// (agentkit.events.EVENT_SCHEMA). Text is only ever set as text (textContent), never parsed as markup.
"use strict";

(() => {
  const run = document.body.dataset.run;
  const rounds = document.getElementById("rounds");
  const status = document.getElementById("status");
  const ending = document.getElementById("ending");
  const seen = [];
  const received = [];
  window.agentkitSeen = seen; // the ids shown, in order (the browser tests read them)
  window.agentkitReceived = received; // every id that arrived, a repeat included
  let last = -1;

  document.getElementById("run-id").textContent = run;

  const el = (tag, cls, text) => {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  };
  const args = (value) => JSON.stringify(value);

  const round = (n) => {
    let section = document.getElementById(`round-${n}`);
    if (!section) {
      section = el("section", "round");
      section.id = `round-${n}`;
      section.append(el("h2", null, `Round ${n}`), el("p", "rationale"), el("ul", "calls"));
      rounds.append(section);
    }
    return section;
  };

  const show = {
    run_start(e) {
      status.textContent = "running";
      document.title = `agentkit run ${e.run_id}`;
    },
    round_start(e) {
      const section = round(e.round);
      if (e.info.closing_round) section.classList.add("closing");
    },
    rationale_delta(e) {
      const rationale = round(e.round).querySelector(".rationale");
      rationale.textContent = e.text;
      rationale.dataset.updates = String(Number(rationale.dataset.updates || 0) + 1);
    },
    answer_delta(e) {
      const section = round(e.round);
      let pre = section.querySelector(".answer");
      if (!pre) section.append((pre = el("pre", "answer")));
      pre.textContent = args(e.partial);
    },
    partial_discarded(e) {
      const section = round(e.round);
      section.querySelector(".rationale").textContent = "";
      section.querySelector(".answer")?.remove();
    },
    llm_call(e) {
      if (e.error) round(e.round).querySelector(".calls").append(el("li", "failed", `model: ${e.error.message}`));
    },
    tool_call(e) {
      const li = el("li", "call running");
      li.dataset.tool = e.tool_name;
      li.append(el("span", "label", e.label || e.tool_name), el("code", "args", args(e.args)), el("span", "result"));
      round(e.round).querySelector(".calls").append(li);
    },
    tool_result(e) {
      const calls = round(e.round).querySelectorAll(`.call.running[data-tool="${CSS.escape(e.tool_name)}"]`);
      const li = calls[0];
      if (!li) return;
      li.classList.remove("running");
      li.querySelector(".label").textContent = e.tool_name;
      const said = e.error ? `failed: ${e.error.message}` : e.observation ? `retry: ${e.observation}` : `${e.batch_size} result${e.batch_size === 1 ? "" : "s"}`;
      li.classList.add(e.error ? "failed" : "done");
      li.querySelector(".result").textContent = said;
    },
    proposal(e) {
      const p = e.proposal;
      const box = el("div", "proposal");
      box.append(
        el("strong", null, `Proposed: ${p.tool_name}`),
        el("code", "args", args(p.args)),
        el("p", "why", p.rationale),
        el("p", "note", "awaits a person's approval"),
      );
      round(e.round).append(box);
    },
    degeneration(e) {
      const what = e.refused ? "refused (repeats an earlier call)" : "repeated an earlier call: the run stops";
      round(e.round).querySelector(".calls").append(el("li", "repeat", `${e.tool_name} ${args(e.args)} ${what}`));
    },
    run_end(e) {
      const r = e.result;
      ending.hidden = false;
      ending.replaceChildren(el("h2", null, `Ended: ${r.outcome}`), el("p", null, `stop reason ${r.stop_reason}, ${r.rounds} rounds`));
      if (r.error) ending.append(el("p", "failed", r.error.message));
    },
    run_abort(e) {
      ending.hidden = false;
      ending.replaceChildren(el("h2", null, "Aborted"), el("p", "failed", `${e.error.type}: ${e.error.message}`));
    },
  };

  const source = new EventSource(`${encodeURIComponent(run)}/events`);
  source.onopen = () => {
    status.textContent = "live";
  };
  source.onmessage = (message) => {
    const id = Number(message.lastEventId);
    received.push(id);
    if (id <= last) return; // already shown (a reconnect resumes after the last id, so this does not happen)
    last = id;
    seen.push(id);
    const event = JSON.parse(message.data);
    (show[event.kind] || (() => {}))(event);
    document.body.dataset.received = String(seen.length);
  };
  source.onerror = () => {
    status.textContent = source.readyState === EventSource.CLOSED ? "ended" : "reconnecting";
    if (source.readyState === EventSource.CLOSED) document.body.dataset.closed = "true";
  };
})();
