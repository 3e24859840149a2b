"""The fabric server: the fabric at run time (:mod:`.fabric`), the ways tools reach it
(:mod:`.wire`), what changes it while it runs (:mod:`.live`), each tray's own view of it
(:mod:`.host`), and the processes that run it all (:mod:`.run`)."""
