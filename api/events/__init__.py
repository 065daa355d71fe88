"""Server-Sent Events for one run, fed from the database so every API process sees every write."""
