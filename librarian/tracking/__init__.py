"""Run tracking with MLflow (see docs/tracking.md)."""

from librarian.tracking.tracker import (
    Tracker,
    TrackingError,
    check_server,
    flatten,
    local_uri,
    metric_history,
)

__all__ = ["Tracker", "TrackingError", "check_server", "flatten", "local_uri", "metric_history"]
