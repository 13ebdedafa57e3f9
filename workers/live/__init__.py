"""The live pipeline of the distributed mode: the faust-streaming worker of one
projection version (``app``), how it batches records with no fixed timer
(``batches``), how it applies them so that no offset is skipped and an unreadable
erasure stops only its partition (``apply``), its static consumer group membership
(``membership``), and the supervisor that runs and restarts the workers
(``supervisor``)."""
