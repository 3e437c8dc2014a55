"""What holds uploaded bytes: the content-addressed blob store (blobstore), the streaming
multipart receiver that writes an upload into it (uploads), the collector that removes orphan
blobs, stale temp files and finished job folders (collector), a stored zip read in memory for
the code view (submitted_zip) and the students' stored zips read for the similarity check
(submission_sources). Import the modules by their paths; nothing is re-exported here."""
