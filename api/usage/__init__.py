"""What runs cost: GPU-seconds (and worker-slot-seconds on CPU queues) per attempt, rolled up (docs/scheduling.md)."""
