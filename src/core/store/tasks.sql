-- infermatrix store: tasks with checkable answers (issue 31 item 2; docs/workloads.md, "tasks").
-- Applied on every read-write open after workload.sql; every statement is idempotent.
-- Table: task_requests (one row per task sent, beside its workload_requests row). View: task_results
-- (contract: its first twelve columns' names and order are public; more may follow).

CREATE TABLE IF NOT EXISTS task_requests (
    run_id              VARCHAR NOT NULL,
    request_no          INTEGER NOT NULL,   -- the workload_requests row (its output_tokens, outcome, reply)
    task_set            VARCHAR NOT NULL,   -- builtin | the task file's name
    task_id             VARCHAR NOT NULL,   -- the same id in two runs = the same task (compare pairs by it)
    task_kind           VARCHAR,            -- arith | count | reverse | sort | file
    expected            VARCHAR,            -- the exact answer (NULL: judged by regex)
    regex               VARCHAR,            -- the regex the output must match (NULL: judged by answer)
    extracted           VARCHAR,            -- the answer read from the output (docs/metrics.md, "Task accuracy")
    correct             BOOLEAN NOT NULL,   -- judged right (never for a failed request)
    reasoning_tokens    INTEGER,            -- usage.completion_tokens_details.reasoning_tokens; NULL: not reported
    finish_reason       VARCHAR,            -- stop (the model's own end) | length (max_tokens cut it)
    PRIMARY KEY (run_id, request_no)
);

-- One row per run and task set. n: tasks whose request ended normally (a failed request is counted in
-- `failed`, not judged); accuracy's interval is Wilson's (views.sql wilson_bound); output tokens are the server's
-- usage count; the interval of their mean (Student t, computed where the pass ran: core/tasks/stats.py) and how
-- the pass stopped come from the pass's parameters as run.
CREATE OR REPLACE VIEW task_results AS
WITH per_task AS (
    SELECT t.run_id, t.task_set, t.correct, t.reasoning_tokens, t.finish_reason, r.output_tokens, r.outcome
    FROM task_requests t JOIN workload_requests r USING (run_id, request_no)
), agg AS (
    SELECT run_id, task_set,
           count(*) FILTER (WHERE outcome = 'ok')                                  AS n,
           count(*) FILTER (WHERE outcome = 'ok' AND correct)                      AS correct,
           avg(output_tokens) FILTER (WHERE outcome = 'ok')                        AS output_tokens_mean,
           list(output_tokens ORDER BY output_tokens) FILTER (WHERE outcome = 'ok') AS ranked,
           avg(reasoning_tokens) FILTER (WHERE outcome = 'ok')                     AS reasoning_tokens_mean,
           count(*) FILTER (WHERE outcome <> 'ok')                                 AS failed,
           count(*) FILTER (WHERE outcome = 'ok' AND finish_reason = 'length')     AS truncated
    FROM per_task
    GROUP BY run_id, task_set
)
SELECT a.run_id, 0 AS point, a.task_set, a.n, a.correct,
       a.correct::DOUBLE / nullif(a.n, 0)  AS accuracy,
       wilson_bound(a.correct, a.n, -1)    AS accuracy_lo,
       wilson_bound(a.correct, a.n, 1)     AS accuracy_hi,
       a.output_tokens_mean,
       nearest_rank(a.ranked, 0.5)         AS output_tokens_p50,
       nearest_rank(a.ranked, 0.9)         AS output_tokens_p90,
       a.reasoning_tokens_mean,
       -- after the contract columns
       try_cast(json_extract(p.params, '$.result.output_tokens_lo') AS DOUBLE) AS output_tokens_lo,
       try_cast(json_extract(p.params, '$.result.output_tokens_hi') AS DOUBLE) AS output_tokens_hi,
       a.failed, a.truncated,
       json_extract_string(p.params, '$.result.stopped_by') AS stopped_by,
       p.status
FROM agg a JOIN workload_passes p USING (run_id)
ORDER BY a.run_id, a.task_set;
