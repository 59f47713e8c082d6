"""Side-by-side benchmarks: durable effect groups against native Restate combinators."""
