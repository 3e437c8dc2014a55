"""Typed reads shared by the pages, the API, the CLI and the run notices: submissions and their
runs (submission_reads), grades, upload windows and the run that counts (grade_reads), the
gradebook (gradebook_reads), the live run's state (runstatus) and the GPU a run was measured on
(gpu_info). They read the models through a session and import no web module. Import the modules
by their paths; nothing is re-exported here."""
