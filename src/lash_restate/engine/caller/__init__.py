"""The caller's side: what runs in the user's handler (the controller, and its open in parts)."""
