"""HTTP mechanics shared by the views: the request body and strict JSON, JSON answers, the one
error handler, conditional requests (ETags, preconditions) and signed cursors."""
