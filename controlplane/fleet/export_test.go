package fleet

// Queued is how many heartbeats wait for the writer's next batch.
func (w *Writer) Queued() int { return len(w.in) }

// MaxBatch is the writer's bound on one statement.
func (w *Writer) MaxBatch() int { return w.maxBatch }
