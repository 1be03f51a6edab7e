"""The dashboard's views, one idea each: header, task table, PS traffic panel, event log."""
