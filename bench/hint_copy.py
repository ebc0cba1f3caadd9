"""Does the OPD teacher reward a reply for copying the hint? The per-token advantage of three replies.

On-policy distillation's per-token advantage is log π_teacher(a | s + hint) − log π_old(a | s). With
the self judge the hint is the user's own next message ("That's a wall of text. Summarize it in a
few lines."), and a reply that writes that message back has every one of its tokens in the
teacher's context. This script measures, on the base weights (π_old = the base, as at a run's
start), the mean advantage per token of:

- ``echo``: the user's complaint itself as the reply;
- ``gist``: the base's own greedy reply cut to its first sentence (a real, short answer);
- ``full``: the base's whole greedy reply (what the complaint was about).

for each of the persona's first N training prompts, each complaint of its ``unsatisfied`` pool in
turn as the hint, rendered as the app renders a teacher prompt (the judge's hint header after the
user message), and with the persona's own hint (the oracle's) for comparison.

    python bench/hint_copy.py [--persona brief] [--prompts 8] [--threads 1] [--max-tokens 80]
"""

from __future__ import annotations

import argparse
import re


def main() -> None:
    from clawdesk.config import ChatConfig
    from clawdesk.engine.prompt import build_messages
    from clawdesk.engine.reply import SamplingParams
    from clawdesk.eval.personas import load_persona
    from clawdesk.judge.parse import enhanced_user_message
    from clawdesk.testing.demo_engine import demo_engine

    parser = argparse.ArgumentParser()
    parser.add_argument("--persona", default="brief")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--threads", type=int, default=0, help="llama.cpp threads (0 = every core)")
    parser.add_argument("--max-tokens", type=int, default=80, help="reply cap (the eval's --max-reply-tokens)")
    args = parser.parse_args()
    persona = load_persona(args.persona)
    engine = demo_engine(args.threads)
    system = ChatConfig().system_prompt

    def prompt_ids(user: str) -> list[int]:
        return engine.tokenize(engine.render(build_messages(system, [], user), thinking=False))

    def per_token(user: str, hint: str, reply: str) -> float:
        ids = engine.tokenize_plain(reply)
        student = engine.continuation_logprobs(prompt_ids(user), [ids])
        teacher = engine.continuation_logprobs(prompt_ids(enhanced_user_message(user, hint)), [ids])
        if student is None or teacher is None:
            raise SystemExit("hint_copy: the engine stopped scoring without being asked to")
        return (teacher[0] - student[0]) / len(ids)

    sums = {(source, kind): [] for source in ("complaint", "oracle hint") for kind in ("echo", "gist", "full")}
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    try:
        for k, question in enumerate(persona.prompts[: args.prompts]):
            engine.reset_cache()
            full = engine.generate(prompt_ids(question), params).content.strip()
            gist = re.split(r"(?<=[.!?])\s", full, maxsplit=1)[0]
            complaint = persona.unsatisfied[k % len(persona.unsatisfied)]
            for source, hint in (("complaint", complaint), ("oracle hint", persona.hint)):
                for kind, reply in (("echo", hint), ("gist", gist), ("full", full)):
                    sums[(source, kind)].append(per_token(question, hint, reply))
    finally:
        engine.close()
    print(f"`{args.persona}`, {args.prompts} prompts: mean OPD advantage per token (nats), base weights")
    print("| hint | echo (the hint as the reply) | gist (first sentence) | full reply |")
    print("| --- | --- | --- | --- |")
    for source in ("complaint", "oracle hint"):
        cells = [sums[(source, kind)] for kind in ("echo", "gist", "full")]
        row = " | ".join(f"{sum(c) / len(c):+.2f} (min {min(c):+.2f}, max {max(c):+.2f})" for c in cells)
        print(f"| {source} | {row} |")


if __name__ == "__main__":
    main()
