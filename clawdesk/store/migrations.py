"""Named schema migrations for the turn log (sqlite-utils ``Migrations``).

Each step is append-only: never edit a step that has shipped, add a new one. The tables are
plain and readable in ``sqlite-utils`` or Datasette; token ids live in ``turn_tokens`` as
packed little-endian int32 blobs (see :mod:`clawdesk.store.tokens`) so long prompts stay small.
"""

from __future__ import annotations

from sqlite_utils import Migrations

from clawdesk.store.migrations_steps import m007_step_keyed_learning

MIGRATIONS = Migrations("clawdesk")


@MIGRATIONS()
def m001_foundation(db):
    db.execute(
        """
        CREATE TABLE sessions (
            id INTEGER PRIMARY KEY,
            title TEXT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            incognito INTEGER NOT NULL DEFAULT 0,
            thinking INTEGER NOT NULL DEFAULT 1,
            system_prompt TEXT NOT NULL
        )
        """
    )
    db.execute(
        """
        CREATE TABLE turns (
            id INTEGER PRIMARY KEY,
            session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            user_content TEXT NOT NULL,
            reply_content TEXT NOT NULL,
            reply_thinking TEXT NOT NULL DEFAULT '',
            status TEXT NOT NULL CHECK (status IN ('finished', 'cancelled', 'length')),
            thinking INTEGER NOT NULL,
            model_name TEXT NOT NULL,
            model_path TEXT NOT NULL,
            model_sha256 TEXT NOT NULL,
            adapter_version INTEGER,
            n_prompt_tokens INTEGER NOT NULL,
            n_reply_tokens INTEGER NOT NULL,
            dropped_turns INTEGER NOT NULL DEFAULT 0,
            latency_ms REAL,
            tokens_per_s REAL,
            started_at TEXT NOT NULL,
            finished_at TEXT NOT NULL,
            UNIQUE (session_id, seq)
        )
        """
    )
    db.execute(
        """
        CREATE TABLE turn_tokens (
            turn_id INTEGER PRIMARY KEY REFERENCES turns(id) ON DELETE CASCADE,
            prompt_ids BLOB NOT NULL,
            reply_ids BLOB NOT NULL
        )
        """
    )
    db.execute(
        """
        CREATE TABLE settings (
            key TEXT PRIMARY KEY,
            value TEXT NOT NULL,
            updated_at TEXT NOT NULL
        )
        """
    )
    db.execute(
        """
        CREATE TABLE model_files (
            path TEXT NOT NULL,
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            sha256 TEXT NOT NULL,
            PRIMARY KEY (path, size, mtime_ns)
        )
        """
    )
    # A role/content view, so the log reads like a chat transcript in Datasette.
    db.execute(
        """
        CREATE VIEW messages AS
            SELECT session_id, seq, 0 AS part, 'user' AS role, user_content AS content,
                   '' AS thinking, started_at AS at, id AS turn_id FROM turns
            UNION ALL
            SELECT session_id, seq, 1, 'assistant', reply_content, reply_thinking, finished_at, id
            FROM turns
        """
    )
    db.execute("CREATE INDEX turns_session ON turns(session_id, seq)")


@MIGRATIONS()
def m002_judge(db):
    # Whether learning was ON when the turn happened: OFF means "never learn from this turn".
    db.execute("ALTER TABLE turns ADD COLUMN learning INTEGER NOT NULL DEFAULT 1")
    db.execute(
        """
        CREATE TABLE judgments (
            turn_id INTEGER PRIMARY KEY REFERENCES turns(id) ON DELETE CASCADE,
            status TEXT NOT NULL CHECK (status IN ('judged', 'dropped')),
            next_turn_id INTEGER REFERENCES turns(id) ON DELETE SET NULL,
            prompt_version TEXT,
            judge_model_name TEXT,
            judge_model_sha256 TEXT,
            score_outputs TEXT,         -- JSON list: raw text of every score vote
            votes TEXT,                 -- JSON list: parsed votes (+1/-1/0, null = invalid)
            reward INTEGER,             -- r_final, majority of valid votes
            hint_outputs TEXT,          -- JSON list: raw text of every hint vote
            hint TEXT,                  -- accepted hint (longest), NULL = no OPD signal
            enhanced_user TEXT,         -- last user message with the hint appended
            enhanced_prompt_ids BLOB,   -- the teacher's prompt tokens (s_t + hint), exactly
            seconds REAL,
            note TEXT,
            judged_at TEXT NOT NULL
        )
        """
    )
    db.execute(
        """
        CREATE TABLE feedback (
            turn_id INTEGER PRIMARY KEY REFERENCES turns(id) ON DELETE CASCADE,
            rating INTEGER CHECK (rating IN (-1, 1)),   -- explicit thumbs, overrides r_final
            vetoed INTEGER NOT NULL DEFAULT 0,          -- never train on this turn
            updated_at TEXT NOT NULL
        )
        """
    )


@MIGRATIONS()
def m003_learn(db):
    db.execute(
        """
        CREATE TABLE adapters (
            version INTEGER PRIMARY KEY,           -- v1, v2, ... in training order
            status TEXT NOT NULL CHECK (status IN ('ready', 'rejected')),
            parent_version INTEGER,                -- the adapter this one continued from
            base_name TEXT NOT NULL,
            base_sha256 TEXT NOT NULL,             -- served GGUF the adapter belongs to
            path TEXT NOT NULL,                    -- <adapters dir>/v<N>
            n_samples INTEGER NOT NULL,
            metrics TEXT NOT NULL,                 -- JSON: loss, reward mean, clip fraction, kl, tokens/s...
            validation TEXT NOT NULL,              -- JSON: checks and held-out log-probs
            note TEXT NOT NULL DEFAULT '',
            created_at TEXT NOT NULL
        )
        """
    )
    db.execute(
        """
        CREATE TABLE adapter_samples (
            version INTEGER NOT NULL REFERENCES adapters(version) ON DELETE CASCADE,
            turn_id INTEGER NOT NULL UNIQUE REFERENCES turns(id) ON DELETE CASCADE,  -- trained on once
            reward REAL NOT NULL,
            has_hint INTEGER NOT NULL,
            PRIMARY KEY (version, turn_id)
        )
        """
    )


@MIGRATIONS()
def m004_memory(db):
    # The personal memory of the `remember` / `recall` tools: notes outlive chats (they are not per turn).
    db.execute(
        """
        CREATE TABLE notes (
            id INTEGER PRIMARY KEY,
            content TEXT NOT NULL,
            tags TEXT NOT NULL DEFAULT '',
            created_at TEXT NOT NULL
        )
        """
    )
    # Full-text index over the notes (external content: the text is stored once, in `notes`), kept
    # in sync by triggers so every writer, including a person with the sqlite3 shell, updates it.
    db.execute(
        "CREATE VIRTUAL TABLE notes_fts USING fts5("
        "content, tags, content='notes', content_rowid='id', tokenize='porter unicode61')"
    )
    db.execute(
        """
        CREATE TRIGGER notes_ai AFTER INSERT ON notes BEGIN
            INSERT INTO notes_fts(rowid, content, tags) VALUES (new.id, new.content, new.tags);
        END
        """
    )
    db.execute(
        """
        CREATE TRIGGER notes_ad AFTER DELETE ON notes BEGIN
            INSERT INTO notes_fts(notes_fts, rowid, content, tags) VALUES ('delete', old.id, old.content, old.tags);
        END
        """
    )
    db.execute(
        """
        CREATE TRIGGER notes_au AFTER UPDATE ON notes BEGIN
            INSERT INTO notes_fts(notes_fts, rowid, content, tags) VALUES ('delete', old.id, old.content, old.tags);
            INSERT INTO notes_fts(rowid, content, tags) VALUES (new.id, new.content, new.tags);
        END
        """
    )


@MIGRATIONS()
def m005_agent_steps(db):
    # One user message can take several model calls (the agent loop): each is a step with the exact
    # prompt and reply ids served, so each is a training sample (OpenClaw-RL trains per step). The
    # turn row keeps the final answer and turn_tokens the final step's ids, so everything that reads
    # turns (history, the judge from the user's next message, samples, export) works unchanged.
    db.execute(
        """
        CREATE TABLE steps (
            id INTEGER PRIMARY KEY,
            turn_id INTEGER NOT NULL REFERENCES turns(id) ON DELETE CASCADE,
            idx INTEGER NOT NULL,                  -- 0, 1, ... model calls within the turn; the last is final
            prompt_ids BLOB NOT NULL,              -- packed int32, as turn_tokens
            reply_ids BLOB NOT NULL,
            reply_content TEXT NOT NULL,           -- what the model wrote, <tool_call> blocks included
            reply_thinking TEXT NOT NULL DEFAULT '',
            status TEXT NOT NULL CHECK (status IN ('finished', 'cancelled', 'length')),
            adapter_version INTEGER,
            started_at TEXT NOT NULL,
            finished_at TEXT NOT NULL,
            UNIQUE (turn_id, idx)
        )
        """
    )
    db.execute(
        """
        CREATE TABLE tool_calls (
            id INTEGER PRIMARY KEY,
            step_id INTEGER NOT NULL REFERENCES steps(id) ON DELETE CASCADE,
            idx INTEGER NOT NULL,                  -- order within the step (results match calls by order)
            name TEXT NOT NULL,
            arguments TEXT NOT NULL,               -- JSON object as parsed ('{}' for a malformed block)
            raw TEXT NOT NULL DEFAULT '',          -- the block as the model wrote it
            result TEXT NOT NULL,                  -- exactly what the model read as the tool message
            status TEXT NOT NULL CHECK (status IN ('ok', 'error', 'denied', 'timeout')),
            duration_s REAL NOT NULL,
            UNIQUE (step_id, idx)
        )
        """
    )
    db.execute(
        """
        CREATE TABLE step_judgments (
            step_id INTEGER PRIMARY KEY REFERENCES steps(id) ON DELETE CASCADE,
            prompt_version TEXT,
            judge_model_name TEXT,
            judge_model_sha256 TEXT,
            score_outputs TEXT,                    -- JSON list: raw text of every vote
            votes TEXT,                            -- JSON list: +1/-1/0, null = invalid
            hint TEXT,                             -- accepted hint from the tool results, NULL = none
            hint_outputs TEXT,
            enhanced_prompt_ids BLOB,              -- the step's prompt with the hint appended (OPD teacher)
            seconds REAL,
            judged_at TEXT NOT NULL
        )
        """
    )
    db.execute(
        """
        CREATE TABLE adapter_step_samples (
            version INTEGER NOT NULL REFERENCES adapters(version) ON DELETE CASCADE,
            step_id INTEGER NOT NULL UNIQUE REFERENCES steps(id) ON DELETE CASCADE,  -- trained on once
            reward REAL NOT NULL,                  -- the step reward used (stepwise: o + mean votes)
            has_hint INTEGER NOT NULL,
            PRIMARY KEY (version, step_id)
        )
        """
    )
    db.execute("CREATE INDEX steps_turn ON steps(turn_id, idx)")
    db.execute("CREATE INDEX tool_calls_step ON tool_calls(step_id, idx)")


# Whether the judge has nothing left to do for a turn: it has a judgment (or was dropped), it was
# vetoed, or its chat is incognito. Kept in ``turns.judge_done`` by the triggers of m006.
_JUDGE_DONE = """
    EXISTS (SELECT 1 FROM judgments j WHERE j.turn_id = turns.id)
    OR coalesce((SELECT f.vetoed FROM feedback f WHERE f.turn_id = turns.id), 0) != 0
    OR coalesce((SELECT s.incognito FROM sessions s WHERE s.id = turns.session_id), 0) != 0
"""

# Whether a judgment can no longer give a training sample: its turn was trained on, or it carries no
# signal (reward 0, no teacher prompt, no thumbs). Kept in ``judgments.sample_done`` by m006's triggers.
_SAMPLE_DONE = """
    EXISTS (SELECT 1 FROM adapter_samples a WHERE a.turn_id = judgments.turn_id)
    OR (coalesce(judgments.reward, 0) = 0
        AND NOT (judgments.hint IS NOT NULL AND coalesce(length(judgments.enhanced_prompt_ids), 0) > 0)
        AND NOT EXISTS (SELECT 1 FROM feedback f WHERE f.turn_id = judgments.turn_id AND f.rating IS NOT NULL))
"""


@MIGRATIONS()
def m006_scale(db):
    # The sidebar shows the newest chats a page at a time (Store.recent_sessions); without this index
    # every page sorted all sessions (10,000 chats: ~20 ms and a full scan per reply).
    db.execute("CREATE INDEX sessions_recent ON sessions(updated_at DESC, id DESC)")
    # What the judge asks after every reply ("which turn next?", the backlog counts, stale turns) is an
    # anti-join, turns without a judgment, that no index can answer: it scanned every turn ever recorded.
    # So each turn carries `judge_done` (see _JUDGE_DONE), kept by the triggers below whoever writes (the
    # app, `forget`'s cascades, a person with the sqlite3 shell), and a partial index holds only the
    # turns the judge still has to look at: the backlog, not the log. The queries keep every one of
    # their rules: the flag narrows where they look, it never decides.
    db.execute("ALTER TABLE turns ADD COLUMN judge_done INTEGER NOT NULL DEFAULT 0")
    db.execute(f"UPDATE turns SET judge_done = ({_JUDGE_DONE})")
    # session_id and seq ride along so "has it a next message?" is answered from the index.
    db.execute(
        "CREATE INDEX turns_unjudged ON turns(id, session_id, seq) "
        "WHERE judge_done = 0 AND learning = 1 AND status IN ('finished', 'length')"
    )
    recompute = f"UPDATE turns SET judge_done = ({_JUDGE_DONE})"
    for name, event, where in (
        ("turns_judge_done_ai", "AFTER INSERT ON turns", "id = new.id"),
        ("judgments_judge_done_ad", "AFTER DELETE ON judgments", "id = old.turn_id"),
        ("feedback_judge_done_ai", "AFTER INSERT ON feedback", "id = new.turn_id"),
        ("feedback_judge_done_au", "AFTER UPDATE OF vetoed ON feedback", "id = new.turn_id"),
        ("feedback_judge_done_ad", "AFTER DELETE ON feedback", "id = old.turn_id"),
        ("sessions_judge_done_au", "AFTER UPDATE OF incognito ON sessions", "session_id = new.id"),
    ):
        db.execute(f"CREATE TRIGGER {name} {event} BEGIN {recompute} WHERE {where}; END")
    # Likewise for counting ready samples (after every reply and judgment): a judgment carries whether it
    # can no longer give a sample (_SAMPLE_DONE: trained on already, or no signal: reward 0, no teacher,
    # no thumbs), so the partial index holds what may still be trained on, not every judgment ever made.
    db.execute("ALTER TABLE judgments ADD COLUMN sample_done INTEGER NOT NULL DEFAULT 0")
    db.execute(f"UPDATE judgments SET sample_done = ({_SAMPLE_DONE})")
    db.execute("CREATE INDEX judgments_untrained ON judgments(turn_id) WHERE status = 'judged' AND sample_done = 0")
    resample = f"UPDATE judgments SET sample_done = ({_SAMPLE_DONE})"
    for name, event, where in (
        ("judgments_sample_done_au", "AFTER UPDATE OF reward, hint, enhanced_prompt_ids ON judgments", "new.turn_id"),
        ("adapter_samples_sample_done_ai", "AFTER INSERT ON adapter_samples", "new.turn_id"),
        ("adapter_samples_sample_done_ad", "AFTER DELETE ON adapter_samples", "old.turn_id"),
        ("feedback_sample_done_ai", "AFTER INSERT ON feedback", "new.turn_id"),
        ("feedback_sample_done_au", "AFTER UPDATE OF rating ON feedback", "new.turn_id"),
        ("feedback_sample_done_ad", "AFTER DELETE ON feedback", "old.turn_id"),
    ):
        db.execute(f"CREATE TRIGGER {name} {event} BEGIN {resample} WHERE turn_id = {where}; END")
    # INSERT OR REPLACE of a judgment fires no delete trigger (recursive_triggers is off) and resets
    # sample_done to its default: the insert trigger sets both flags from the facts.
    db.execute(
        f"""
        CREATE TRIGGER judgments_flags_ai AFTER INSERT ON judgments BEGIN
            {recompute} WHERE id = new.turn_id;
            {resample} WHERE turn_id = new.turn_id;
        END
        """
    )


MIGRATIONS()(m007_step_keyed_learning)  # written in migrations_steps.py (this file stays under 500 lines)


@MIGRATIONS()
def m008_preferences(db):
    # The preference memory (clawdesk.store.prefs): how the person wants replies *in general*, in
    # their words, rendered into every new turn's system prompt. Items made from a turn name the
    # user message that stated them (source) and the reply it corrected (judged): `forget` deletes
    # an item with either turn, as it deletes the judgment they came from. Items added by hand have
    # neither. A removed item stays listed (undone, or replaced by a later one: replaced_by) but
    # is never rendered; "learned" ones left the prompt because the adapter carries them.
    db.execute(
        """
        CREATE TABLE preferences (
            id INTEGER PRIMARY KEY,
            text TEXT NOT NULL,
            source_turn_id INTEGER REFERENCES turns(id) ON DELETE CASCADE,
            judged_turn_id INTEGER REFERENCES turns(id) ON DELETE CASCADE,
            status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'learned', 'removed')),
            pinned INTEGER NOT NULL DEFAULT 0,
            replaced_by INTEGER REFERENCES preferences(id) ON DELETE SET NULL,
            learned_at TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX preferences_source ON preferences(source_turn_id)")
    db.execute("CREATE INDEX preferences_judged ON preferences(judged_turn_id)")


@MIGRATIONS()
def m009_turn_memory(db):
    # Consolidation (clawdesk.store.turn_memory): which preference items were in a turn's prompt, as
    # rendered (the block's exact text, so the judge can rebuild the served prompt for its teacher),
    # and each step's prompt without them (the student's prompt in training: the weights learn to do
    # without the memory what the memory made the served reply do). A turn served with no item has
    # no row and NULL student ids: its served prompt is its student prompt. Item ids carry no foreign
    # key: an item deleted later leaves the turn's record of what its prompt held.
    db.execute(
        """
        CREATE TABLE turn_memory (
            turn_id INTEGER PRIMARY KEY REFERENCES turns(id) ON DELETE CASCADE,
            block TEXT NOT NULL,
            item_ids TEXT NOT NULL
        )
        """
    )
    db.execute("ALTER TABLE steps ADD COLUMN student_prompt_ids BLOB")
