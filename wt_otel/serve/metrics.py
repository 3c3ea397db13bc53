"""Process counters and gauges, rendered in the Prometheus text format for `GET /metrics`.

Deliberately tiny: a few counters with optional labels, no histograms, no
client library; every increment is one dict update under a lock.
"""

from __future__ import annotations

import threading
from collections import defaultdict

Labels = tuple[tuple[str, str], ...]

HELP = {
    "wt_otel_spans_received_total": "Spans received by the OTLP receivers.",
    "wt_otel_log_records_received_total": "Log records received by the OTLP receivers.",
    "wt_otel_metric_points_dropped_total": "OTLP metric data points received and dropped (wt-otel keeps traces and "
                                           "logs; metrics are accepted so an app's exporter does not fail).",
    "wt_otel_records_accepted_total": "Spans and log records accepted into the pipeline.",
    "wt_otel_records_rejected_total": "Spans and log records rejected, by reason.",
    "wt_otel_records_dropped_total": "Records dropped by a processor, by reason (e.g. not GenAI).",
    "wt_otel_sessions_open": "Sessions being assembled.",
    "wt_otel_sessions_written_total": "Session revisions written to the data dir.",
    "wt_otel_sessions_flushed_incomplete_total": "Sessions flushed early because a memory bound was hit.",
    "wt_otel_sessions_without_content_total": "Sessions written with no message content (capture off), by service.",
    "wt_otel_replay_skipped_total": "Flagged incidents not replayed, by reason (no_conversation: nothing to inject; "
                                    "no_target: no replay target for the service).",
    "wt_otel_sessions_reopened_total": "Written sessions re-opened by late records (a new revision follows).",
    "wt_otel_sessions_joined_total": "Sessions without a conversation id written as the next revision of the "
                                     "session whose history they extend exactly or whose trace they link to, by "
                                     "evidence (continuation, link).",
    "wt_otel_pipeline_errors_total": "Sessions that could not be built or written (a bug; see the log).",
    "wt_otel_flags_raised_total": "Sessions flagged as incidents.",
    "wt_otel_http_connections_refused_total": "OTLP/HTTP connections over the connection limits with every "
                                              "connection busy: let in to answer /healthz only (anything else: 503).",
    "wt_otel_http_connections_closed_total": "OTLP/HTTP connections closed by serve, by reason: evicted (idle, to "
                                             "make room for a new one), silent (no request within "
                                             "http_first_request_timeout).",
    "wt_otel_http_read_timeouts_total": "OTLP/HTTP requests that did not arrive whole within http_read_timeout.",
    "wt_otel_queue_bytes": "Estimated bytes waiting in the pipeline queue (queue.max_bytes budget).",
    "wt_otel_datadir_degraded": "1 while the data dir cannot be written (disk full): exports get 503.",
    "wt_otel_sessions_deferred": "Sessions kept in memory while the data dir cannot be written.",
    "wt_otel_sessions_quarantined_total": "Sessions set aside in <data-dir>/quarantine (a stage failed on them).",
    "wt_otel_sessions_lost_total": "Sessions neither written nor quarantined (the log says why).",
    "wt_otel_sessions_kept_unrendered_total": "Session revisions kept as records only (datadir.render: flagged).",
    "wt_otel_sessions_rendered_on_demand_total": "Sessions rendered later from their records (sessions render, flag).",
    "wt_otel_render_workers": "Render worker processes (datadir.workers).",
    "wt_otel_render_pending": "Session revisions handed to the render workers and not yet indexed.",
    "wt_otel_render_worker_restarts_total": "Render workers that died or hung on a session and were replaced.",
    "wt_otel_index_commits_total": "Group commits (one fsync each) of index lines for sessions the workers wrote.",
    "wt_otel_session_warnings_total": "What the importer did not understand in a session, by kind (logged once).",
    "wt_otel_queue_depth": "Records waiting in the pipeline queue.",
    "wt_otel_span_index_info": "1, labelled with the span index implementation serve runs (native: the C "
                               "extension; python: the fallback; off: not used). WT_OTEL_SPANINDEX chooses.",
    "wt_otel_memory_held_bytes": "Estimated bytes held by the queue, open sessions and retained records "
                                 "(the queue.max_bytes budget).",
    "wt_otel_backlog_seconds": "How far behind the writer is (oldest queued batch's wait, or time to "
                               "write the sessions waiting, at its measured speed); past "
                               "queue.max_backlog_seconds requests are refused before decoding.",
    "wt_otel_requests_shed_total": "Export requests refused before decoding (429 / RESOURCE_EXHAUSTED or 503 + retry "
                                   "info), by reason: the writer behind or the memory budget spent (queue_full), "
                                   "store_unavailable, shutting_down.",
    "wt_otel_requests_total": "OTLP export requests, by transport, signal and status.",
    "wt_otel_replay_queue_depth": "Automatic replays queued or running (not done).",
    "wt_otel_replays_queued_total": "Flagged incidents imported and queued for automatic replay.",
    "wt_otel_replays_total": "Automatic replays done, by verdict.",
    "wt_otel_replay_errors_total": "Automatic replays that ended in ERROR (never retried).",
    "wt_otel_replay_refused_total": "Flagged incidents not queued for replay (queue full, import failed).",
    "wt_otel_replay_duplicates_total": "Revisions of an already queued or replayed incident (not queued again).",
    "wt_otel_segment_bytes": "Bytes of the segment log on disk (durability.max_bytes caps it).",
    "wt_otel_segment_files": "Segment files in <data-dir>/segments.",
    "wt_otel_segment_fsyncs_total": "fsyncs of segment files (group commits, rotations).",
    "wt_otel_segment_commit_batches_total": "Group commits: each acknowledged every request appended since the last.",
    "wt_otel_segment_commit_entries_total": "Requests made durable by group commits (/ batches: requests per fsync).",
    "wt_otel_segment_write_errors_total": "Failed segment appends or fsyncs (full disk, EIO): those requests refused.",
    "wt_otel_segment_refusals_total": "Requests refused by the segment log: at durability.max_bytes (429), or while "
                                      "an fsync is stalled (503).",
    "wt_otel_segment_fsync_stalled": "1 while a segment fsync has not returned for durability.fsync_stall_timeout.",
    "wt_otel_segment_torn_tails_total": "Torn last frames cut at start-up (a kill mid-append; never acknowledged).",
    "wt_otel_segment_corrupt_frames_total": "Corrupt frames (length or checksum) in the middle of the newest segments "
                                            "at start-up: skipped, the frames after them kept.",
    "wt_otel_segment_replayed_requests_total": "Requests replayed from the segment log at start-up.",
    "wt_otel_segment_checkpoint_generation": "The segment generation the checkpoint is in (older ones are deleted).",
    "wt_otel_segments_deleted_total": "Segment generations deleted: every record in them is written.",
    "wt_otel_sessions_unchanged_total": "Session revisions not written because the same records were written "
                                        "before (a replay after restart).",
    "wt_otel_sessions_deferred_to_restart": "Open sessions the shutdown deadline left in the segment log.",
    "wt_otel_records_deferred_to_restart_total": "Records made durable while serve was stopping: replayed next start.",
}


class Metrics:
    """One process's counters, plus the last snapshot of another process's (`absorb`): serve's receiver process and
    its session core each count their own, and each one's /metrics and `get` show the sum."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[Labels, float]] = defaultdict(dict)
        self._other: dict[str, dict[Labels, float]] = {}

    def snapshot(self) -> dict[str, dict[Labels, float]]:
        """This process's own values (not what it absorbed), to send to the other process."""
        with self._lock:
            return {k: dict(v) for k, v in self._values.items()}

    def absorb(self, snapshot: dict[str, dict[Labels, float]]) -> None:
        """The other process's values, as of its last `snapshot` (they replace the previous one)."""
        with self._lock:
            self._other = snapshot

    def inc(self, name: str, n: float = 1, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            series = self._values[name]
            series[key] = series.get(key, 0) + n

    def set(self, name: str, value: float, **labels: str) -> None:
        with self._lock:
            self._values[name][tuple(sorted(labels.items()))] = value

    def get(self, name: str, **labels: str) -> float:
        key = tuple(sorted(labels.items()))
        with self._lock:
            return self._values.get(name, {}).get(key, 0) + self._other.get(name, {}).get(key, 0)

    def render(self) -> str:
        """Prometheus text exposition format 0.0.4."""
        lines: list[str] = []
        with self._lock:
            snapshot = {k: dict(v) for k, v in self._values.items()}
            for name, series in self._other.items():
                mine = snapshot.setdefault(name, {})
                for labels, value in series.items():
                    mine[labels] = mine.get(labels, 0) + value
        for name in sorted(set(snapshot) | set(HELP)):
            kind = "counter" if name.endswith("_total") else "gauge"
            lines.append(f"# HELP {name} {HELP.get(name, name)}")
            lines.append(f"# TYPE {name} {kind}")
            for labels, value in sorted(snapshot.get(name, {}).items()):
                label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
                lines.append(f"{name}{{{label_text}}} {value:g}" if label_text else f"{name} {value:g}")
        return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
