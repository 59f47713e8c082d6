"""`LashChild` and `LashSignal`: a child's run and a durable event, and how a child is routed."""
