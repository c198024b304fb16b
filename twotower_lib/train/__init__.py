"""Training a two-tower (or single-tower) model: the loop (`loop`), a run's configuration (`config`), what each
step reads (`batches`), the process group and DeepSpeed's engine (`deepspeed_setup`), the torch engines
(`torch_engine`) and exact resume (`checkpoints`). Light on import: the configuration is read without torch's
training stack."""
