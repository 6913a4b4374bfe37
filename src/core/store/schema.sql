-- infermatrix store: tables. Applied on every read-write open; every statement is idempotent.
-- Times: TIMESTAMP columns are UTC wall clock; window_*/sent/first_token/ended are the runner's
-- time.monotonic() seconds (only comparable within one run, kept to reconcile with server metrics).
-- No foreign keys: DuckDB forbids updating/deleting referenced rows, which resume/retry needs.

CREATE TABLE IF NOT EXISTS schema_version (
    version    INTEGER PRIMARY KEY,
    applied_at TIMESTAMP NOT NULL
);

CREATE TABLE IF NOT EXISTS runs (
    run_id          VARCHAR PRIMARY KEY,
    name            VARCHAR,
    engine          VARCHAR,
    engine_version  VARCHAR,
    model           VARCHAR,
    hardware        JSON,
    engine_extra    JSON,          -- EngineInfo.extra: quantization, backend, build ...
    launch_command  VARCHAR,       -- redacted before it gets here
    config          JSON,          -- the validated run config (no secrets: keys are read from env/files)
    tool_version    VARCHAR,
    host            VARCHAR,
    api             VARCHAR,       -- completions | chat
    prompt_mode     VARCHAR,       -- distinct | shared
    token_source    VARCHAR,       -- usage | chunks (how output tokens were counted)
    duration_s      DOUBLE,        -- measurement window per decode cell
    max_output      INTEGER,
    max_model_len   INTEGER,
    kv_tokens       BIGINT,
    max_seqs        INTEGER,
    capacity_source VARCHAR,
    capacity_detail JSON,          -- Capacity.detail: what the capacity was computed from
    tokenizer       VARCHAR,       -- how prompt lengths were counted (server /tokenize, calibration ...)
    started_at      TIMESTAMP,
    finished_at     TIMESTAMP,
    status          VARCHAR NOT NULL DEFAULT 'running',  -- running|completed|interrupted|failed|imported
    error           VARCHAR,       -- why a failed run failed (redacted)
    notes           VARCHAR,       -- free text; a dict given here is stored as JSON text
    source          VARCHAR,       -- v2: where the numbers come from when infermatrix did not measure them
                                   --     (an imported published page); NULL for runs measured by infermatrix
    imported_at     TIMESTAMP,     -- v2: when `infermatrix import` brought the run into this database
    engine_metrics  JSON           -- whether the engine's own gauges were found, and the names asked
);
-- Columns added while schema v1 was in development: keep databases written before them working.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS capacity_detail JSON;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS tokenizer VARCHAR;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS error VARCHAR;
-- Schema v1 -> v2 (imported runs, Parquet merge): two columns at the end of runs.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS source VARCHAR;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS imported_at TIMESTAMP;
-- Added within v2 (a nullable column at the end: older stores gain it on their next read-write open).
ALTER TABLE runs ADD COLUMN IF NOT EXISTS engine_metrics JSON;
-- v3: the client's own share of every TTFT — median round trip of an empty request (docs/metrics.md).
ALTER TABLE runs ADD COLUMN IF NOT EXISTS client_overhead_ms DOUBLE;
-- Added within v4 (nullable, at the end): the run's wall time in seconds by phase group (docs/metrics.md, "Harness overhead").
ALTER TABLE runs ADD COLUMN IF NOT EXISTS phase_seconds JSON;

CREATE TABLE IF NOT EXISTS prefill (
    run_id         VARCHAR NOT NULL,
    context_tokens INTEGER NOT NULL,
    prompt_tokens  INTEGER,
    ttft_ms        DOUBLE,
    prompt_tps     DOUBLE,
    status         VARCHAR NOT NULL,   -- valid | client_bound | error | over_capacity | interrupted
    reason         VARCHAR,
    saved_at       TIMESTAMP,
    PRIMARY KEY (run_id, context_tokens)
);
-- v3: how many cold probes the point's ttft_ms is the median of (NULL: one probe, before v3).
ALTER TABLE prefill ADD COLUMN IF NOT EXISTS samples INTEGER;

-- v3: every probe of a prefill point, the throwaway first (sample_no 0); the point is the median of the rest.
CREATE TABLE IF NOT EXISTS prefill_samples (
    run_id         VARCHAR NOT NULL,
    context_tokens INTEGER NOT NULL,
    sample_no      INTEGER NOT NULL,
    throwaway      BOOLEAN NOT NULL,
    request_id     VARCHAR,            -- the X-Request-Id sent: joins the probe to the server's own logs
    prompt_tokens  INTEGER,
    ttft_ms        DOUBLE,
    sent           DOUBLE,             -- monotonic s: when the request was handed to its connection, before its write
    first_token    DOUBLE,
    outcome        VARCHAR,            -- ok; held: … (the client's loop held it: not in the median); or what went wrong
    PRIMARY KEY (run_id, context_tokens, sample_no)
);

CREATE TABLE IF NOT EXISTS cells (
    run_id          VARCHAR NOT NULL,
    context_tokens  INTEGER NOT NULL,
    concurrency     INTEGER NOT NULL,
    status          VARCHAR NOT NULL,  -- see infermatrix.core.types.CELL_STATUSES
    reason          VARCHAR,
    total_tps       DOUBLE,
    per_request_tps DOUBLE,
    ttft_ms         DOUBLE,
    tbt_ms          DOUBLE,
    avg_active      DOUBLE,
    completed       INTEGER,
    output_tokens   BIGINT,
    measured_s      DOUBLE,
    window_start    DOUBLE,
    window_end      DOUBLE,
    token_source    VARCHAR,
    prompt_tokens   INTEGER,
    started_at      TIMESTAMP,
    finished_at     TIMESTAMP,
    flags           JSON,
    saved_at        TIMESTAMP,
    PRIMARY KEY (run_id, context_tokens, concurrency)
);
-- v3: ttft_ms's two populations (median, count): each stream's opening request (the burst after warm-up)
-- and the restarts sent before the window closed; and the most requests the engine reported running at
-- once (NULL without engine gauges), which an admission_limited cell is judged by.
ALTER TABLE cells ADD COLUMN IF NOT EXISTS ttft_burst_ms DOUBLE;
ALTER TABLE cells ADD COLUMN IF NOT EXISTS ttft_burst_n INTEGER;
ALTER TABLE cells ADD COLUMN IF NOT EXISTS ttft_restart_ms DOUBLE;
ALTER TABLE cells ADD COLUMN IF NOT EXISTS ttft_restart_n INTEGER;
ALTER TABLE cells ADD COLUMN IF NOT EXISTS ran_at_most DOUBLE;

-- One row per streamed request of a cell (all of them, inside the window or not).
-- request_no is the position in CellResult.requests, so (stream_index, seq) need not be unique.
CREATE TABLE IF NOT EXISTS requests (
    run_id         VARCHAR NOT NULL,
    context_tokens INTEGER NOT NULL,
    concurrency    INTEGER NOT NULL,
    request_no     INTEGER NOT NULL,
    stream_index   INTEGER,
    seq            INTEGER,
    sent           DOUBLE,
    first_token    DOUBLE,
    ended          DOUBLE,
    ttft_ms        DOUBLE,
    output_tokens  INTEGER,
    chunks         INTEGER,            -- chunks that carried output (> output_tokens/chunks = spec. decoding)
    prompt_tokens  INTEGER,
    finish_reason  VARCHAR,
    outcome        VARCHAR,
    error          VARCHAR,
    token_source   VARCHAR,
    looped         BOOLEAN NOT NULL DEFAULT false,
    loop_evidence  JSON,               -- the LoopFinding, when looped
    text           VARCHAR             -- last 4 KB of the output, only when looped (evidence)
);

-- HDR histograms (microseconds), encoded as HdrHistogram's compressed base64 text.
CREATE TABLE IF NOT EXISTS histograms (
    run_id         VARCHAR NOT NULL,
    context_tokens INTEGER NOT NULL,
    concurrency    INTEGER NOT NULL,
    metric         VARCHAR NOT NULL,   -- ttft | tbt | e2e | itl
    unit           VARCHAR NOT NULL DEFAULT 'us',
    count          BIGINT NOT NULL,
    encoded        VARCHAR NOT NULL,
    PRIMARY KEY (run_id, context_tokens, concurrency, metric)
);

-- DuckDB cannot decode HDR, so each histogram's percentiles are decoded once at save time
-- (a fixed grid, see infermatrix.core.store.cells.PERCENTILE_GRID) and kept here for SQL.
CREATE TABLE IF NOT EXISTS histogram_percentiles (
    run_id         VARCHAR NOT NULL,
    context_tokens INTEGER NOT NULL,
    concurrency    INTEGER NOT NULL,
    metric         VARCHAR NOT NULL,
    percentile     DOUBLE NOT NULL,
    value_ms       DOUBLE NOT NULL,
    PRIMARY KEY (run_id, context_tokens, concurrency, metric, percentile)
);

-- v5: SLOs as data (docs/slo.md). One row per limit of a named SLO, attached to a run: by the run's
-- [slo] table, or later by `report --slo` / `compare --slo`. metric: ttft_ms | tpot_ms | e2e_ms | tps |
-- attainment (the goal share of good requests); percentile NULL: every request must meet the limit.
CREATE TABLE IF NOT EXISTS slo_limits (
    run_id      VARCHAR NOT NULL,
    slo         VARCHAR NOT NULL,
    metric      VARCHAR NOT NULL,
    percentile  DOUBLE,
    limit_value DOUBLE NOT NULL,
    source      VARCHAR,            -- config | --slo | mlperf
    defined_at  TIMESTAMP
);

-- v5: the price of a GPU-hour for a run's cost figures (`--gpu-hour-price`; else the config's
-- hardware.gpu_hour_usd is read from runs.config).
CREATE TABLE IF NOT EXISTS run_costs (
    run_id       VARCHAR PRIMARY KEY,
    gpu_hour_usd DOUBLE NOT NULL,
    set_at       TIMESTAMP
);

-- v5: the engine's own counters around each cold prefill probe set (prefix cache, speculative decoding),
-- differenced; decode cells keep theirs in cells.flags.engine_counters.
ALTER TABLE prefill ADD COLUMN IF NOT EXISTS engine_counters JSON;

-- v9: every repeat of a cell measured K > 1 times (matrix.repeat, `run --repeat K`; docs/metrics.md, "Repeats"):
-- one row per repeat, the columns of cells (its own window, numbers, flags) and its HDR histograms (metric ->
-- encoded). The cell's cells row is then the cell across its repeats (means of the numbers, sums of the counts:
-- store/repeats.py), its histograms the repeats' merged, its requests every repeat's (requests.repeat). A cell
-- measured once has no row here: its cells row is its one measurement, as before v9.
CREATE TABLE IF NOT EXISTS cell_repeats (
    run_id          VARCHAR NOT NULL,
    context_tokens  INTEGER NOT NULL,
    concurrency     INTEGER NOT NULL,
    repeat          INTEGER NOT NULL,  -- 1 … K, in the order measured within the cell
    status          VARCHAR NOT NULL,
    reason          VARCHAR,
    total_tps       DOUBLE,
    per_request_tps DOUBLE,
    ttft_ms         DOUBLE,
    tbt_ms          DOUBLE,
    avg_active      DOUBLE,
    completed       INTEGER,
    output_tokens   BIGINT,
    measured_s      DOUBLE,
    window_start    DOUBLE,
    window_end      DOUBLE,
    token_source    VARCHAR,
    prompt_tokens   INTEGER,
    started_at      TIMESTAMP,
    finished_at     TIMESTAMP,
    flags           JSON,
    ttft_burst_ms   DOUBLE,
    ttft_burst_n    INTEGER,
    ttft_restart_ms DOUBLE,
    ttft_restart_n  INTEGER,
    ran_at_most     DOUBLE,
    histograms      JSON,
    saved_at        TIMESTAMP,
    PRIMARY KEY (run_id, context_tokens, concurrency, repeat)
);
-- v9: which repeat a request belongs to (NULL: a cell measured once); request_no is then
-- (repeat - 1) x 1,000,000 + its position in that repeat, unique within the cell.
ALTER TABLE requests ADD COLUMN IF NOT EXISTS repeat INTEGER;
-- v11: time to the first answer (non-reasoning) token, from the send (docs/metrics.md, TTFO; NULL: no answer token
-- came), and whether a reasoning field carried text in the stream.
ALTER TABLE requests ADD COLUMN IF NOT EXISTS ttfo_ms DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS reasoning BOOLEAN;
-- v12: the server's own count of the request's reasoning tokens (usage.completion_tokens_details.reasoning_tokens of
-- the closing usage chunk; NULL: the server reported none, or the stream ended without that chunk).
ALTER TABLE requests ADD COLUMN IF NOT EXISTS reasoning_tokens INTEGER;
