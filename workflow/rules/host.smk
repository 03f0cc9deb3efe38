rule host_facts:
    output:
        "results/host.json",
    log:
        "results/logs/host_facts.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "python -m dlvirt host --output {output:q} > {log:q} 2>&1"
