-- Sweeps over engine settings (issue 29; docs/tuning.md, docs/metrics.md "Sweeps").
-- Contract: table run_settings(run_id, key, value); views sweep_runs(sweep_id, run_id, setting, status),
-- sweep_frontier(sweep_id, run_id, setting, context_label, concurrency, tps_per_gpu, tps_per_user, on_frontier, usd_per_mtok),
-- best_setting(sweep_id, slo, context_label, run_id, setting, objective, value, runner_up_setting, runner_up_value, margin,
-- beyond_noise). Everything below is a view over stored runs: an SLO stored later (`report --slo`) re-decides at once.

-- A sweep: its id and name, and what it was asked (configs, grid, zip, --set) as JSON.
CREATE TABLE IF NOT EXISTS sweeps (
    sweep_id   VARCHAR PRIMARY KEY,
    name       VARCHAR,
    created_at TIMESTAMP,
    spec       JSON
);

-- Every combination of a sweep, named before anything starts (so Ctrl-C or a crash leaves the missing ones known):
-- k its place (1..K), source the config file, config the validated config it runs with (what `resume` runs).
CREATE TABLE IF NOT EXISTS sweep_members (
    sweep_id VARCHAR NOT NULL,
    run_id   VARCHAR NOT NULL,
    k        INTEGER NOT NULL,
    source   VARCHAR,
    config   JSON,
    PRIMARY KEY (sweep_id, run_id)
);

-- A run's setting: the grid's key -> value (the value as written, e.g. '64', 'true', '{"num_speculative_tokens":2}'),
-- position its place in the grid (the order sweep_runs.setting lists them).
CREATE TABLE IF NOT EXISTS run_settings (
    run_id   VARCHAR NOT NULL,
    key      VARCHAR NOT NULL,
    value    VARCHAR NOT NULL,
    position INTEGER,
    PRIMARY KEY (run_id, key)
);

-- One row per combination: its setting as 'k=v, k=v', and its run's status ('not started' before it has a run).
-- After the contract columns: k, the failure's one-line reason (below; runs.error keeps the engine's last log lines
-- whole), the config file, the sweep's name.
CREATE OR REPLACE VIEW sweep_runs AS
SELECT m.sweep_id, m.run_id,
       coalesce((SELECT string_agg(s.key || '=' || s.value, ', ' ORDER BY s.position, s.key)
                 FROM run_settings s WHERE s.run_id = m.run_id), '(as configured)') AS setting,
       coalesce(r.status, 'not started') AS status,
       m.k,
       -- the reason in one line: the error's first line, and its last one where more follow (an engine that did not
       -- start: "sim exited with code 2 before it was ready; last lines of its log: … error: <the engine's words>")
       CASE WHEN len(list_filter(string_split(r.error, chr(10)), lambda x: trim(x) <> '')) > 1
            THEN split_part(r.error, chr(10), 1) || ' … ' || trim(list_filter(string_split(r.error, chr(10)), lambda x: trim(x) <> '')[-1])
            ELSE trim(r.error) END AS reason,
       m.source, w.name AS sweep_name
FROM sweep_members m
JOIN sweeps w ON w.sweep_id = m.sweep_id
LEFT JOIN runs r ON r.run_id = m.run_id
ORDER BY m.sweep_id, m.k;

-- The throughput-interactivity frontier across every setting of a sweep, per context: the cells of `frontier`
-- (the same points: tok/s per GPU and per user of each valid cell), a cell on it when no cell of ANY run of the
-- sweep in the same context has at least as much of both and more of one (frontier's own rule, over the sweep).
-- tps_per_gpu NULL: the GPU count is unknown (gpus_note says how to give it); such cells are not judged.
CREATE OR REPLACE VIEW sweep_frontier AS
WITH pts AS (
    SELECT s.sweep_id, f.run_id, s.setting, f.context_label, f.context_tokens, f.concurrency, f.tps_per_gpu, f.tps_per_user,
           f.usd_per_mtok, f.gpus
    FROM sweep_runs s JOIN frontier f ON f.run_id = s.run_id
)
SELECT a.sweep_id, a.run_id, a.setting, a.context_label, a.concurrency, a.tps_per_gpu, a.tps_per_user,
       CASE WHEN a.tps_per_gpu IS NOT NULL THEN NOT EXISTS (
           SELECT 1 FROM pts b
           WHERE b.sweep_id = a.sweep_id AND b.context_tokens = a.context_tokens
             AND b.tps_per_gpu >= a.tps_per_gpu AND b.tps_per_user >= a.tps_per_user
             AND (b.tps_per_gpu > a.tps_per_gpu OR b.tps_per_user > a.tps_per_user)
       ) END AS on_frontier,
       a.usd_per_mtok, a.context_tokens, a.gpus,
       CASE WHEN a.gpus IS NULL THEN 'GPU count unknown: give it with --set hardware.gpus=N' END AS gpus_note
FROM pts a
ORDER BY a.sweep_id, a.context_tokens, a.setting, a.concurrency;

-- Per setting, context and stored SLO, the setting's figure for each objective (runs completed or stopped only):
-- goodput:  the most SLO goodput per GPU over the context's cells that meet the SLO (good requests' output tokens per
--           second of the window, slo_cells.token_goodput, ÷ the run's GPUs; per server where the GPU count is unknown);
-- capacity: the largest concurrency whose cell meets the SLO (slo_capacity), ties broken by tok/s per GPU there.
-- With the cell it was read at, and that cell's total tok/s interval (cell_intervals) for the noise rule.
CREATE OR REPLACE VIEW sweep_setting_scores AS
WITH members AS (
    SELECT s.sweep_id, s.run_id, s.setting FROM sweep_runs s WHERE s.status IN ('completed', 'stopped')
), goodput AS (
    SELECT m.sweep_id, m.run_id, m.setting, c.slo, c.context_label, c.context_tokens, 'goodput' AS objective,
           c.token_goodput / coalesce(g.gpus, 1) AS value, c.concurrency, c.token_goodput / coalesce(g.gpus, 1) AS tiebreak,
           g.gpus
    FROM members m JOIN slo_cells c ON c.run_id = m.run_id AND c.meets
    LEFT JOIN run_gpus g ON g.run_id = m.run_id
    WHERE c.token_goodput IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY m.sweep_id, m.run_id, c.slo, c.context_tokens ORDER BY value DESC, c.concurrency) = 1
), capacity AS (
    SELECT m.sweep_id, m.run_id, m.setting, k.slo, k.context_label, k.context_tokens, 'capacity' AS objective,
           k.max_concurrency_meeting::DOUBLE AS value, k.max_concurrency_meeting AS concurrency,
           coalesce(k.tps_per_gpu_at_max, k.total_tps_at_max) AS tiebreak, g.gpus
    FROM members m JOIN slo_capacity k ON k.run_id = m.run_id AND k.max_concurrency_meeting IS NOT NULL
    LEFT JOIN run_gpus g ON g.run_id = m.run_id
)
SELECT x.*, i.lo AS tps_lo, i.hi AS tps_hi
FROM (SELECT * FROM goodput UNION ALL SELECT * FROM capacity) x
LEFT JOIN cell_intervals i ON i.run_id = x.run_id AND i.context_tokens = x.context_tokens AND i.concurrency = x.concurrency
    AND i.metric = 'total_tps';

-- The best setting per sweep, SLO, context and objective, its runner-up, and whether the margin is beyond the noise.
-- margin: value ÷ runner_up_value − 1. beyond_noise (docs/tuning.md, "The noise rule"), for goodput the rule of
-- `compare` (core/intervals/ratio.py verdict_of) on the two cells read: ln(value ÷ runner-up) above
-- 1.96 × √(se₁² + se₂²), each se = (ln hi − ln lo) ÷ 3.92 of the cell's total tok/s interval; where a side has no
-- interval, the fixed rule: a margin over 2 %. For capacity the load grid is the resolution: beyond noise when the
-- winner met the SLO at a larger load of the grid than the runner-up did (a tie is not). NULL without a runner-up.
CREATE OR REPLACE VIEW best_setting AS
WITH ranked AS (
    SELECT *, row_number() OVER (PARTITION BY sweep_id, slo, context_tokens, objective ORDER BY value DESC, tiebreak DESC, run_id) AS place,
           count(*) FILTER (WHERE gpus IS NULL) OVER (PARTITION BY sweep_id, slo, context_tokens, objective) AS unknown_gpus
    FROM sweep_setting_scores
), pair AS (
    SELECT a.*, b.run_id AS ru_run_id, b.setting AS ru_setting, b.value AS ru_value, b.concurrency AS ru_concurrency,
           (ln(a.tps_hi) - ln(a.tps_lo)) / 3.92 AS se_a, (ln(b.tps_hi) - ln(b.tps_lo)) / 3.92 AS se_b
    FROM ranked a
    LEFT JOIN ranked b ON b.sweep_id = a.sweep_id AND b.slo = a.slo AND b.context_tokens = a.context_tokens
        AND b.objective = a.objective AND b.place = 2
    WHERE a.place = 1
)
SELECT sweep_id, slo, context_label, run_id, setting, objective, value,
       ru_setting AS runner_up_setting, ru_value AS runner_up_value,
       value / nullif(ru_value, 0) - 1 AS margin,
       CASE WHEN ru_run_id IS NULL THEN NULL
            WHEN objective = 'capacity' THEN value > ru_value
            WHEN ru_value <= 0 THEN value > 0
            WHEN se_a IS NOT NULL AND se_b IS NOT NULL THEN ln(value / ru_value) > 1.96 * sqrt(se_a * se_a + se_b * se_b)
            ELSE value / ru_value - 1 > 0.02 END AS beyond_noise,
       -- after the contract columns: where each was read, how the noise was judged, and a note on GPUs
       concurrency, ru_run_id AS runner_up_run_id, ru_concurrency AS runner_up_concurrency, context_tokens,
       CASE WHEN ru_run_id IS NULL THEN NULL WHEN objective = 'capacity' THEN 'load grid'
            WHEN se_a IS NOT NULL AND se_b IS NOT NULL THEN 'intervals' ELSE 'fixed 2 % rule' END AS noise_method,
       CASE WHEN unknown_gpus > 0 THEN 'GPU count unknown: goodput is per server, not per GPU; give it with --set hardware.gpus=N' END AS gpus_note
FROM pair
ORDER BY sweep_id, slo, context_tokens, objective;
