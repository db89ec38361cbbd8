//! Dead letters: list, replay, drop; and redeliver (stub).
