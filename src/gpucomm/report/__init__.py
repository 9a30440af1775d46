"""Reports of results: Chrome/Perfetto traces of simulated timelines, sweep plots."""
