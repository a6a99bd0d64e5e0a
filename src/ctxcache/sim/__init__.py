"""Trace readers and (later) the trace-driven simulator."""
