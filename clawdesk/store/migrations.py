"""Named schema migrations for the turn log (sqlite-utils ``Migrations``).

Each step is append-only: never edit a step that has shipped, add a new one. The tables are
plain and readable in ``sqlite-utils`` or Datasette; token ids live in ``turn_tokens`` as
packed little-endian int32 blobs (see :mod:`clawdesk.store.tokens`) so long prompts stay small.
"""

from __future__ import annotations

from sqlite_utils import Migrations

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
