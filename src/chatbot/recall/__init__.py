"""Thread recall: a late question finds the earlier turns of its own thread that left the model window."""
