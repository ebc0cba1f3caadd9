"""Migration m007: turns and tool steps in one model (registered in :mod:`clawdesk.store.migrations`).

A plain chat turn becomes a one-step turn, and judgments and training samples become keyed by
step. Kept in its own module for size only; like every shipped step it is never edited, only
followed by new ones. ``STEP_JUDGE_DONE`` and ``STEP_SAMPLE_DONE`` are the flag definitions the
scale tests check the triggers against.
"""

from __future__ import annotations

# From m007 on, every turn has steps (a plain chat turn is a one-step agent turn: its step 0 is its
# answer), and what was learned is keyed by step: one ``judgments`` table whose ``next_state`` says
# what the step was judged from ('user': the turn's final step, from the user's next message;
# 'tools': a tool step, from its tool results) and one ``adapter_samples`` table (which version
# trained on which step). The flags and triggers of m006 carry over to the new keys.

# A turn's judge is done: its final step was judged from the user (or dropped), it was vetoed, or incognito.
STEP_JUDGE_DONE = """
    EXISTS (SELECT 1 FROM steps st JOIN judgments j ON j.step_id = st.id
            WHERE st.turn_id = turns.id AND j.next_state = 'user')
    OR coalesce((SELECT f.vetoed FROM feedback f WHERE f.turn_id = turns.id), 0) != 0
    OR coalesce((SELECT s.incognito FROM sessions s WHERE s.id = turns.session_id), 0) != 0
"""

# A judgment can no longer give a sample: its step was trained on, or (a turn's answer) it carries no signal.
# A tool step's signal also depends on its turn's outcome, judged later, so only training settles it.
STEP_SAMPLE_DONE = """
    EXISTS (SELECT 1 FROM adapter_samples a WHERE a.step_id = judgments.step_id)
    OR (judgments.next_state = 'user' AND coalesce(judgments.reward, 0) = 0
        AND NOT (judgments.hint IS NOT NULL AND coalesce(length(judgments.enhanced_prompt_ids), 0) > 0)
        AND NOT EXISTS (SELECT 1 FROM feedback f JOIN steps fs ON fs.turn_id = f.turn_id
                        WHERE fs.id = judgments.step_id AND f.rating IS NOT NULL))
"""

_STEPS_OF_TURN = "(SELECT id FROM steps WHERE turn_id = {})"
_FINAL = "fin.idx = (SELECT max(x.idx) FROM steps x WHERE x.turn_id = fin.turn_id)"


def m007_step_keyed_learning(db):
    # 1. A plain turn's one step: its answer with the served ids (a turn whose ids `forget` scrubbed keeps none).
    db.execute(
        """
        INSERT INTO steps(turn_id, idx, prompt_ids, reply_ids, reply_content, reply_thinking, status,
                          adapter_version, started_at, finished_at)
        SELECT t.id, 0, coalesce(tt.prompt_ids, X''), coalesce(tt.reply_ids, X''), t.reply_content,
               t.reply_thinking, t.status, t.adapter_version, t.started_at, t.finished_at
        FROM turns t LEFT JOIN turn_tokens tt ON tt.turn_id = t.id
        WHERE NOT EXISTS (SELECT 1 FROM steps s WHERE s.turn_id = t.id)
        ORDER BY t.id
        """
    )
    # 2. The new tables under temporary names; the old ones' rows move over, keyed by step.
    db.execute(
        """
        CREATE TABLE judgments_m007 (
            step_id INTEGER PRIMARY KEY REFERENCES steps(id) ON DELETE CASCADE,
            next_state TEXT NOT NULL CHECK (next_state IN ('user', 'tools')),  -- what the step was judged from
            status TEXT NOT NULL CHECK (status IN ('judged', 'dropped')),      -- dropped: no next message came
            next_turn_id INTEGER REFERENCES turns(id) ON DELETE SET NULL,      -- 'user': the next message's turn
            prompt_version TEXT,
            judge_model_name TEXT,
            judge_model_sha256 TEXT,
            score_outputs TEXT,         -- JSON list: raw text of every score vote
            votes TEXT,                 -- JSON list: parsed votes (+1/-1/0, null = invalid)
            reward INTEGER,             -- 'user': r_final, majority of valid votes; 'tools': NULL (votes averaged)
            hint_outputs TEXT,          -- JSON list: raw text of every hint vote
            hint TEXT,                  -- accepted hint, NULL = no OPD signal
            enhanced_user TEXT,         -- 'user': last user message with the hint appended
            enhanced_prompt_ids BLOB,   -- the teacher's prompt tokens (s_t + hint), exactly
            seconds REAL,
            note TEXT,
            judged_at TEXT NOT NULL,
            sample_done INTEGER NOT NULL DEFAULT 0  -- see STEP_SAMPLE_DONE
        )
        """
    )
    columns = (
        "prompt_version, judge_model_name, judge_model_sha256, score_outputs, votes, hint_outputs, hint, "
        "enhanced_prompt_ids, seconds, judged_at"
    )
    db.execute(
        f"""
        INSERT INTO judgments_m007(step_id, next_state, status, next_turn_id, reward, enhanced_user, note, {columns})
        SELECT fin.id, 'user', j.status, j.next_turn_id, j.reward, j.enhanced_user, j.note,
               {", ".join("j." + c.strip() for c in columns.split(","))}
        FROM judgments j JOIN steps fin ON fin.turn_id = j.turn_id AND {_FINAL}
        """
    )
    db.execute(
        f"""
        INSERT INTO judgments_m007(step_id, next_state, status, {columns})
        SELECT step_id, 'tools', 'judged', {columns} FROM step_judgments
        """
    )
    db.execute(
        """
        CREATE TABLE adapter_samples_m007 (
            version INTEGER NOT NULL REFERENCES adapters(version) ON DELETE CASCADE,
            step_id INTEGER NOT NULL UNIQUE REFERENCES steps(id) ON DELETE CASCADE,  -- trained on once
            reward REAL NOT NULL,                  -- the reward used (a tool step's: stepwise or outcome)
            has_hint INTEGER NOT NULL,
            PRIMARY KEY (version, step_id)
        )
        """
    )
    db.execute(
        f"""
        INSERT INTO adapter_samples_m007(version, step_id, reward, has_hint)
        SELECT a.version, fin.id, a.reward, a.has_hint
        FROM adapter_samples a JOIN steps fin ON fin.turn_id = a.turn_id AND {_FINAL}
        UNION ALL
        SELECT version, step_id, reward, has_hint FROM adapter_step_samples
        """
    )
    # 3. The old tables go (their triggers first: a rename re-checks every trigger's body), the new take their names.
    m006 = "type = 'trigger' AND (sql LIKE '%judge_done%' OR sql LIKE '%sample_done%')"
    for (name,) in db.execute(f"SELECT name FROM sqlite_master WHERE {m006}").fetchall():
        db.execute(f"DROP TRIGGER {name}")
    for table in ("judgments", "step_judgments", "adapter_samples", "adapter_step_samples"):
        db.execute(f"DROP TABLE {table}")
    db.execute("ALTER TABLE judgments_m007 RENAME TO judgments")
    db.execute("ALTER TABLE adapter_samples_m007 RENAME TO adapter_samples")
    # 4. m006's flags, partial index and triggers, on the new keys.
    db.execute(f"UPDATE turns SET judge_done = ({STEP_JUDGE_DONE})")
    db.execute(f"UPDATE judgments SET sample_done = ({STEP_SAMPLE_DONE})")
    db.execute("CREATE INDEX judgments_untrained ON judgments(step_id) WHERE status = 'judged' AND sample_done = 0")
    judge = f"UPDATE turns SET judge_done = ({STEP_JUDGE_DONE}) WHERE"
    sample = f"UPDATE judgments SET sample_done = ({STEP_SAMPLE_DONE}) WHERE"
    turn_of, steps_of = "id = (SELECT turn_id FROM steps WHERE id = {}.step_id)", "step_id IN " + _STEPS_OF_TURN
    for name, event, body in (
        ("turns_judge_done_ai", "AFTER INSERT ON turns", f"{judge} id = new.id"),
        ("judgments_judge_done_ad", "AFTER DELETE ON judgments", f"{judge} {turn_of.format('old')}"),
        ("feedback_judge_done_ai", "AFTER INSERT ON feedback", f"{judge} id = new.turn_id"),
        ("feedback_judge_done_au", "AFTER UPDATE OF vetoed ON feedback", f"{judge} id = new.turn_id"),
        ("feedback_judge_done_ad", "AFTER DELETE ON feedback", f"{judge} id = old.turn_id"),
        ("sessions_judge_done_au", "AFTER UPDATE OF incognito ON sessions", f"{judge} session_id = new.id"),
        ("judgments_sample_done_au", "AFTER UPDATE OF reward, hint, enhanced_prompt_ids ON judgments",
         f"{sample} step_id = new.step_id"),
        ("adapter_samples_sample_done_ai", "AFTER INSERT ON adapter_samples", f"{sample} step_id = new.step_id"),
        ("adapter_samples_sample_done_ad", "AFTER DELETE ON adapter_samples", f"{sample} step_id = old.step_id"),
        ("feedback_sample_done_ai", "AFTER INSERT ON feedback", f"{sample} {steps_of.format('new.turn_id')}"),
        ("feedback_sample_done_au", "AFTER UPDATE OF rating ON feedback", f"{sample} {steps_of.format('new.turn_id')}"),
        ("feedback_sample_done_ad", "AFTER DELETE ON feedback", f"{sample} {steps_of.format('old.turn_id')}"),
        # INSERT OR REPLACE fires no delete trigger (recursive_triggers is off) and resets sample_done: set both.
        ("judgments_flags_ai", "AFTER INSERT ON judgments",
         f"{judge} {turn_of.format('new')}; {sample} step_id = new.step_id"),
    ):  # fmt: skip
        db.execute(f"CREATE TRIGGER {name} {event} BEGIN {body}; END")
