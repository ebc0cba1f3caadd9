"""What each adapter version of an eval run learned: its own replies without the memory, and its batch's OPD signs.

Reads a finished ``clawdesk eval --persona P --out RUN`` (its ``RUN/home``: the log and ``adapters/vN``)
and, on the bundled model in llama.cpp (the GGUF adapters the run served):

- ``own``: for every listed version (0 = the base), the greedy replies (``--max-tokens``, the eval's
  reply cap) to the persona's held-out prompts *without* preference items, and how many of them are
  within ``--words`` words (`brief`'s check is 40) with every word count: what the weights alone
  write, version by version (the eval's ``score_without_memory`` sees only the last one);
- ``batch``: for every listed version N ≥ 1, the samples it trained on, each with its reward, its
  length, and the on-policy-distillation advantage ``log π_teacher − log π_old`` as the trainer's
  default teacher gives it (the base with the served prompt's items and the hint) against
  ``π_old`` = version N−1 in the student's prompt: its mean per token, and at the end token where
  the reply ended with one (a negative value there pushes the stop *down*).

Both are what docs/learning.md's "stop 47" section reads (the OPD term unteaching `brief`'s stop).

    python bench/version_trace.py RUN/seed-0 --persona brief --versions 0,1,2,3,4,5,6 [--part own|batch|both]
"""

from __future__ import annotations

import argparse
import sqlite3
from pathlib import Path


def main() -> None:
    from clawdesk.config import ChatConfig
    from clawdesk.engine.prompt import build_messages
    from clawdesk.engine.reply import SamplingParams
    from clawdesk.eval.personas import load_persona
    from clawdesk.learn.reply_form import words
    from clawdesk.store.tokens import unpack_ids
    from clawdesk.testing.demo_engine import demo_engine

    parser = argparse.ArgumentParser()
    parser.add_argument("run", type=Path, help="one seed's --out directory (it holds home/)")
    parser.add_argument("--persona", required=True)
    parser.add_argument("--versions", default="0,1,2,3,4,5,6")
    parser.add_argument("--part", choices=("own", "batch", "both"), default="both")
    parser.add_argument("--max-tokens", type=int, default=80)
    parser.add_argument("--words", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    home = args.run / "home"
    if not (home / "clawdesk.db").is_file():
        raise SystemExit(f"version_trace: no {home / 'clawdesk.db'}; give a seed's --out directory of a finished eval")
    versions = [int(v) for v in args.versions.split(",") if v]
    persona = load_persona(args.persona)
    engine = demo_engine(args.threads)
    eos = engine.llm.token_eos()

    def serve(version: int) -> bool:
        if version == 0:
            engine.clear_adapter()
            return False
        engine.load_adapter(home / "adapters" / f"v{version}" / "adapter.gguf", version)
        return True

    if args.part in ("own", "both"):
        system, params = ChatConfig().system_prompt, SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
        for version in versions:
            adapter = serve(version)
            counts = []
            for question in persona.heldout:
                ids = engine.tokenize(engine.render(build_messages(system, [], question), thinking=False))
                counts.append(len(words(engine.generate(ids, params, use_adapter=adapter).content)))
            within = sum(n <= args.words for n in counts)
            print(f"own v{version}: {within} of {len(counts)} within {args.words} words; words {counts}", flush=True)

    def logp(prompt: list[int], reply: list[int], adapter: bool) -> tuple[float, float | None]:
        """(log p(reply), log p(end token) at its end, or None where the reply was cut)."""
        total = engine.continuation_logprobs(prompt, [reply], use_adapter=adapter)[0]
        if reply[-1] != eos or len(reply) < 2:
            return total, None
        return total, total - engine.continuation_logprobs(prompt, [reply[:-1]], use_adapter=adapter)[0]

    if args.part in ("batch", "both"):
        db = sqlite3.connect(f"file:{home / 'clawdesk.db'}?mode=ro", uri=True)
        for version in (v for v in versions if v >= 1):
            rows = db.execute(
                """SELECT st.id, st.student_prompt_ids, st.prompt_ids, st.reply_ids, a.reward, j.enhanced_prompt_ids
                   FROM adapter_samples a JOIN steps st ON st.id = a.step_id JOIN judgments j ON j.step_id = st.id
                   WHERE a.version = ? ORDER BY st.id""",
                [version],
            ).fetchall()
            parsed = [
                (sid, unpack_ids(student or served), unpack_ids(served), unpack_ids(reply), reward, enhanced)
                for sid, student, served, reply, reward, enhanced in rows
            ]
            adapter = serve(version - 1)
            old = {sid: logp(student, reply, adapter) for sid, student, _, reply, _, _ in parsed}
            serve(0)
            for sid, _, served, reply, reward, enhanced in parsed:
                teacher = unpack_ids(enhanced) if enhanced else served
                (t_all, t_end), (o_all, o_end) = logp(teacher, reply, False), old[sid]
                end = "cut" if t_end is None or o_end is None else f"{t_end - o_end:+.2f}"
                print(
                    f"batch v{version} step {sid}: reward {reward:+.0f}, {len(reply)} tokens, "
                    f"OPD advantage mean {(t_all - o_all) / len(reply):+.3f}, at the end token {end}",
                    flush=True,
                )
    engine.close()


if __name__ == "__main__":
    main()
