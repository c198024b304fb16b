"""Probing a trained run: a probe run (`run`), its configuration (`config`), the heads (`heads`, Eq. 2) and their
training (`training`, `schedule`), the dtypes they run with (`precision`) and the whitening of their inputs
(`whitening`). Light on import: the configuration is read without torch's training stack."""
