"""The wire: the messages and records every object reads and writes, their routes, formats and errors."""
