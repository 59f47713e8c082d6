"""`LashPump`: the pump object's handlers (its run, the calls it makes, its outcome store)."""
