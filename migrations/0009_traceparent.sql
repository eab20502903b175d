-- The W3C traceparent of a job's dispatch, when the dispatching replica exports traces, so the
-- replicas that lease and settle it can add their spans to the job's trace. Never shown on the
-- wire. A nullable column without a default: adding it rewrites nothing.
ALTER TABLE jobs ADD COLUMN traceparent text
    CHECK (traceparent IS NULL OR length(traceparent) <= 128);
