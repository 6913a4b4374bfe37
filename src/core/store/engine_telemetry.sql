-- infermatrix store: the engine's metrics and the GPUs read as time series while a run measures (core/telemetry/;
-- docs/telemetry.md, docs/metrics.md "Engine and GPU telemetry"). Applied on every open and upgrade, after views.sql
-- (reads cells, decode_matrix, context_label()) and before slo_views.sql (frontier reads gpu_cells).
-- Tables: engine_samples, gpu_series, telemetry_costs. Views: engine_series (helper), engine_timeline, engine_cells
-- (contract column order), gpu_cells. A cell's window is cells.window_start/window_end (time.monotonic(), the
-- clock of t_mono).

-- One row per sample line of a series the engine's traits name, per read (core/telemetry/engine_series.py).
-- metric: the traits' field name (running, waiting, kv_usage, generated_tokens, ...); labels: JSON, the vendor's
-- metric name under __name__; phase: the run's phase at the read; unit: the step (decode 1K×8, prefill 2K, load).
CREATE TABLE IF NOT EXISTS engine_samples (
    run_id VARCHAR NOT NULL,
    t DOUBLE NOT NULL,            -- wall-clock epoch seconds (the middle of the GET)
    phase VARCHAR,
    metric VARCHAR NOT NULL,
    labels VARCHAR,
    value DOUBLE,
    t_mono DOUBLE,                -- time.monotonic() of the run's process
    unit VARCHAR,
    context_tokens INTEGER,       -- of a decode cell or a prefill probe; NULL elsewhere
    concurrency INTEGER           -- of a decode cell; 0 for a prefill probe
);

-- One row per GPU per NVML read (core/telemetry/nvml.py). energy_mj: NVML's total-energy counter (mJ since the
-- driver loaded); throttle_mask: nvmlDeviceGetCurrentClocksThrottleReasons.
CREATE TABLE IF NOT EXISTS gpu_series (
    run_id VARCHAR NOT NULL,
    t DOUBLE NOT NULL,
    t_mono DOUBLE,
    phase VARCHAR,
    unit VARCHAR,
    context_tokens INTEGER,
    concurrency INTEGER,
    gpu INTEGER NOT NULL,
    power_w DOUBLE,
    energy_mj DOUBLE,
    sm_clock_mhz DOUBLE,
    mem_clock_mhz DOUBLE,
    memory_used_mib DOUBLE,
    utilization_pct DOUBLE,
    temperature_c DOUBLE,
    throttle_mask BIGINT
);

-- What each sampler cost the client's machine: reads, failed reads, its thread's CPU seconds, the reads' wall seconds.
CREATE TABLE IF NOT EXISTS telemetry_costs (
    run_id VARCHAR NOT NULL,
    source VARCHAR NOT NULL,      -- engine | gpu
    interval_s DOUBLE,
    reads BIGINT,
    failures BIGINT,
    cpu_s DOUBLE,
    wall_s DOUBLE
);

-- One value per read and series: summed over label sets (ranks, engines, positions), KV usage averaged.
CREATE OR REPLACE VIEW engine_series AS
SELECT run_id, t, t_mono, phase, unit, context_tokens, concurrency, metric,
       CASE WHEN metric = 'kv_usage' THEN avg(value) ELSE sum(value) END AS value
FROM engine_samples GROUP BY run_id, t, t_mono, phase, unit, context_tokens, concurrency, metric;

-- The series per run and phase, with a counter's rate (per second, from the read before; NULL where the counter
-- went down: the engine restarted).
CREATE OR REPLACE VIEW engine_timeline AS
SELECT run_id, phase, unit, context_tokens, concurrency, t, t_mono, metric, value,
       CASE WHEN metric NOT IN ('running', 'waiting', 'kv_usage') AND value >= lag(value) OVER w
            THEN (value - lag(value) OVER w) / nullif(t_mono - lag(t_mono) OVER w, 0) END AS rate
FROM engine_series
WINDOW w AS (PARTITION BY run_id, metric ORDER BY t_mono)
ORDER BY run_id, t_mono, metric;

-- Per decode cell, what the engine's own series say of its window (the reads stamped inside it):
-- engine_tps: generated-token counter between the first and the last read of the window over their time apart
-- (the engine's own output rate: a second, independent check of decode_matrix.total_tps);
-- kv_peak_pct, waiting_max: peaks of the reads; preemptions: the counter's rise between those reads;
-- samples: the reads. After the contract columns: held_back (the engine preempted or queued requests while the
-- client held N in flight), context_tokens, window_s, client_tps (decode_matrix.total_tps), engine_vs_client
-- (engine_tps / client_tps - 1), running_max.
CREATE OR REPLACE VIEW engine_cells AS
WITH win AS (
    SELECT run_id, context_tokens, concurrency, window_start AS ws, window_end AS we
    FROM cells WHERE window_start IS NOT NULL AND window_end > window_start
), s AS (
    SELECT w.run_id, w.context_tokens, w.concurrency, e.metric, e.t_mono, e.value
    FROM win w JOIN engine_series e ON e.run_id = w.run_id AND e.t_mono BETWEEN w.ws AND w.we
), agg AS (
    SELECT run_id, context_tokens, concurrency,
           CASE WHEN count(*) FILTER (WHERE metric = 'generated_tokens') >= 2 THEN
               (arg_max(value, t_mono) FILTER (WHERE metric = 'generated_tokens') - arg_min(value, t_mono) FILTER (WHERE metric = 'generated_tokens'))
               / nullif(max(t_mono) FILTER (WHERE metric = 'generated_tokens') - min(t_mono) FILTER (WHERE metric = 'generated_tokens'), 0)
           END AS engine_tps,
           max(value) FILTER (WHERE metric = 'kv_usage') * 100 AS kv_peak_pct,
           max(value) FILTER (WHERE metric = 'preemptions') - min(value) FILTER (WHERE metric = 'preemptions') AS preemptions,
           max(value) FILTER (WHERE metric = 'waiting') AS waiting_max,
           max(value) FILTER (WHERE metric = 'running') AS running_max,
           count(DISTINCT t_mono) AS samples
    FROM s GROUP BY run_id, context_tokens, concurrency
)
SELECT w.run_id, context_label(w.context_tokens) AS context_label, w.concurrency,
       a.engine_tps, a.kv_peak_pct, a.preemptions, a.waiting_max, coalesce(a.samples, 0) AS samples,
       CASE WHEN a.preemptions IS NOT NULL OR a.waiting_max IS NOT NULL
            THEN coalesce(a.preemptions, 0) > 0 OR coalesce(a.waiting_max, 0) > 0 END AS held_back,
       w.context_tokens, w.we - w.ws AS window_s, d.total_tps AS client_tps,
       a.engine_tps / nullif(d.total_tps, 0) - 1 AS engine_vs_client, a.running_max
FROM win w
LEFT JOIN agg a ON a.run_id = w.run_id AND a.context_tokens = w.context_tokens AND a.concurrency = w.concurrency
LEFT JOIN decode_matrix d ON d.run_id = w.run_id AND d.context_tokens = w.context_tokens AND d.concurrency = w.concurrency
ORDER BY w.run_id, w.context_tokens, w.concurrency;

-- The energy counter at time _t, linear between the reads either side (_t0, _v0) and (_t1, _v1).
CREATE OR REPLACE MACRO counter_at(_t, _t0, _v0, _t1, _v1) AS
    CASE WHEN _t1 IS NULL OR _t0 IS NULL THEN NULL WHEN _t1 = _t0 THEN _v0 ELSE _v0 + (_v1 - _v0) * (_t - _t0) / (_t1 - _t0) END;

-- Per decode cell, the GPUs over its window (NVML): energy_j (every GPU's energy counter at the window's end minus
-- at its start, each edge linear between the reads either side), avg_w (energy_j / window), avg_w_per_gpu,
-- tok_per_j (output tokens per joule: decode_matrix.total_tps / avg_w), j_per_mtok (joules per million output
-- tokens), throttled (a read inside the window had a power or thermal throttle reason set), throttle_reasons
-- (every reason seen inside the window), power_w_mean (mean of the power reads inside the window), samples.
CREATE OR REPLACE VIEW gpu_cells AS
WITH win AS (
    SELECT run_id, context_tokens, concurrency, window_start AS ws, window_end AS we
    FROM cells WHERE window_start IS NOT NULL AND window_end > window_start
), g AS (
    SELECT run_id, gpu, t_mono, energy_mj FROM gpu_series WHERE energy_mj IS NOT NULL AND t_mono IS NOT NULL
), edges AS (
    SELECT w.*, k.gpu FROM win w JOIN (SELECT DISTINCT run_id, gpu FROM g) k ON k.run_id = w.run_id
), s0 AS (
    SELECT e.*, b.t_mono AS b_t, b.energy_mj AS b_e FROM edges e ASOF LEFT JOIN g b ON b.run_id = e.run_id AND b.gpu = e.gpu AND e.ws >= b.t_mono
), s1 AS (
    SELECT e.*, a.t_mono AS a_t, a.energy_mj AS a_e FROM s0 e ASOF LEFT JOIN g a ON a.run_id = e.run_id AND a.gpu = e.gpu AND e.ws <= a.t_mono
), s2 AS (
    SELECT e.*, b.t_mono AS c_t, b.energy_mj AS c_e FROM s1 e ASOF LEFT JOIN g b ON b.run_id = e.run_id AND b.gpu = e.gpu AND e.we >= b.t_mono
), s3 AS (
    SELECT e.*, a.t_mono AS d_t, a.energy_mj AS d_e FROM s2 e ASOF LEFT JOIN g a ON a.run_id = e.run_id AND a.gpu = e.gpu AND e.we <= a.t_mono
), per_gpu AS (
    SELECT run_id, context_tokens, concurrency, ws, we, gpu,
           (counter_at(we, c_t, c_e, d_t, d_e) - counter_at(ws, b_t, b_e, a_t, a_e)) / 1000.0 AS energy_j
    FROM s3
), energy AS (
    SELECT run_id, context_tokens, concurrency, any_value(we - ws) AS window_s, count(*) AS gpus,
           CASE WHEN count(energy_j) = count(*) THEN sum(energy_j) END AS energy_j
    FROM per_gpu GROUP BY run_id, context_tokens, concurrency
), inside AS (
    SELECT w.run_id, w.context_tokens, w.concurrency, bit_or(s.throttle_mask) AS mask, avg(s.power_w) * count(DISTINCT s.gpu) AS power_w_mean,
           count(*) AS samples
    FROM win w JOIN gpu_series s ON s.run_id = w.run_id AND s.t_mono BETWEEN w.ws AND w.we
    GROUP BY w.run_id, w.context_tokens, w.concurrency
)
SELECT e.run_id, context_label(e.context_tokens) AS context_label, e.concurrency, e.gpus, e.energy_j,
       e.energy_j / e.window_s AS avg_w, e.energy_j / e.window_s / e.gpus AS avg_w_per_gpu,
       d.total_tps / nullif(e.energy_j / e.window_s, 0) AS tok_per_j,
       1e6 * (e.energy_j / e.window_s) / nullif(d.total_tps, 0) AS j_per_mtok,
       coalesce(i.mask, 0) & 236 <> 0 AS throttled,  -- 236 = sw_power_cap|hw_slowdown|sw_thermal|hw_thermal|hw_power_brake (nvml.THROTTLING)
       nullif(concat_ws(',',
           CASE WHEN i.mask & 4 <> 0 THEN 'sw_power_cap' END, CASE WHEN i.mask & 8 <> 0 THEN 'hw_slowdown' END,
           CASE WHEN i.mask & 16 <> 0 THEN 'sync_boost' END, CASE WHEN i.mask & 32 <> 0 THEN 'sw_thermal' END,
           CASE WHEN i.mask & 64 <> 0 THEN 'hw_thermal' END, CASE WHEN i.mask & 128 <> 0 THEN 'hw_power_brake' END), '') AS throttle_reasons,
       i.power_w_mean, coalesce(i.samples, 0) AS samples, e.context_tokens, e.window_s
FROM energy e
LEFT JOIN inside i ON i.run_id = e.run_id AND i.context_tokens = e.context_tokens AND i.concurrency = e.concurrency
LEFT JOIN decode_matrix d ON d.run_id = e.run_id AND d.context_tokens = e.context_tokens AND d.concurrency = e.concurrency
ORDER BY e.run_id, e.context_tokens, e.concurrency;
