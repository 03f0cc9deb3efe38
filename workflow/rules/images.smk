# Platform images. CN: built offline from envs/cn.Dockerfile (dlvirt.platforms.container_image), named by the
# hash of its inputs, so nothing is rebuilt while they stay the same; with platforms.CN.image set,
# that image is used (pulled if the engine lacks it). The marker records which image CN jobs run.
rule cn_image:
    input:
        [str(path) for path in cn_image_inputs(Path("."))],
    output:
        CN_IMAGE_MARKER,
    log:
        "results/logs/images/cn.log",
    retries: DOWNLOAD_RETRIES
    conda:
        "../../envs/analysis.yaml"
    resources:
        retry_wait_s=retry_wait_s,
    params:
        settings=quoted_json(config["platforms"][CN]),
        image=CN_IMAGE,
    shell:
        "python -m dlvirt image --settings {params.settings} --output {output:q}"
        " --retry-wait-s {resources.retry_wait_s} > {log:q} 2>&1"
