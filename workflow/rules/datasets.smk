# Synthetic inputs in the real file formats (offline default), or the user's real dataset
# registered and checked when apps.<app>.dataset.path is set.
rule dataset:
    output:
        directory("resources/datasets/{app}"),
    log:
        "results/logs/dataset/{app}.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        settings=dataset_settings,
    shell:
        "python -m dlvirt dataset --app {wildcards.app:q} --settings {params.settings}"
        " --output-dir {output:q} > {log:q} 2>&1"


# The real dataset, for users with network: fetched and checksum-verified by the app, never part
# of `all`. Then point apps.<app>.dataset.path at resources/downloads/<app>.
rule download_dataset:
    output:
        directory("resources/downloads/{app}"),
    log:
        "results/logs/download/{app}.log",
    retries: DOWNLOAD_RETRIES
    conda:
        "../../envs/analysis.yaml"
    resources:
        retry_wait_s=retry_wait_s,
    shell:
        "python -m dlvirt download --app {wildcards.app:q} --output-dir {output:q}"
        " --retry-wait-s {resources.retry_wait_s} > {log:q} 2>&1"


# The model's seeded random initialisation, built once per app, model settings and seed, saved in
# the framework's own format with its SHA-256 beside it: every launch loads it (after checking the
# checksum) instead of initialising the model again. Never built where apps.<app>.weights.path names
# real weights. It takes the bench resource: no benchmark job runs beside it.
rule weights:
    input:
        dataset="resources/datasets/{app}",
    output:
        weights=WEIGHTS_FILE,
        checksum=f"{WEIGHTS_FILE}.sha256",
    log:
        "results/logs/weights/{app}/{tag}/{weights_name}.log",
    conda:
        framework_env
    resources:
        bench=1,
    params:
        settings=weights_settings,
    shell:
        "python -m dlvirt weights --app {wildcards.app:q} --settings {params.settings}"
        " --dataset-dir {input.dataset:q} --output {output.weights:q} > {log:q} 2>&1"
