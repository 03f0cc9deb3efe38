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
