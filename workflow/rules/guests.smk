# Guest disk images of VM, MVM and VMCN (dlvirt.platforms.guestimage): debootstrap bookworm, the Debian
# kernel and a small initrd, the Python stack from the host's wheelhouse (the lock, as for CN);
# "gpu" (VM/*/GPU) adds the NVIDIA driver; "docker" also holds the CN image. Rebuilt only when the
# recipe, the lock or the CN image change.
rule guest_image:
    input:
        guest_image_inputs,
    output:
        [f"{GUEST_IMAGE_DIR}/{{variant}}/{name}" for name in GUEST_IMAGE_FILES],
    log:
        "results/logs/images/guest-{variant}.log",
    wildcard_constraints:
        variant="probe|full|gpu|docker",
    retries: DOWNLOAD_RETRIES
    conda:
        "../../envs/analysis.yaml"
    resources:
        debian_cache=1,
        retry_wait_s=retry_wait_s,
    params:
        out_dir=lambda w: f"{GUEST_IMAGE_DIR}/{w.variant}",
        cn_settings=guest_image_settings,
        cn_image=lambda w: CN_IMAGE if w.variant == "docker" else "",
        # what it installs from Debian (the apps' AppKind.system_packages too): a change rebuilds it
        packages=lambda w: " ".join(guest_debian_packages(w.variant)),
    shell:
        "python -m dlvirt guest-image --variant {wildcards.variant:q} --output-dir {params.out_dir:q}"
        " --cn-settings {params.cn_settings} --cn-image={params.cn_image:q}"
        " --retry-wait-s {resources.retry_wait_s} > {log:q} 2>&1"
