"""Pure parsers of driver_container.formats.kernel.fabric: VPD marker, IB port attributes, NVFM_CONFIG_* overrides,
fabricmanager.cfg and the Fabric block of ``nvidia-smi -q``."""

from __future__ import annotations

from driver_container.formats.kernel.fabric import (
    apply_overrides,
    is_nvlink5_vpd,
    parse_cap_mask,
    parse_config,
    parse_fabric_states,
    parse_port_guid,
    usable_management_port,
)
from driver_container.settings import fabric_overrides_from_env

# The layout of nvidia-smi -q around the Fabric block (Hopper, driver 550+): GPU header, 4-space blocks.
SMI_Q = """
==============NVSMI LOG==============

Timestamp                                 : Thu Dec  3 12:00:00 2026
Driver Version                            : 595.91.07

Attached GPUs                             : 3
GPU 00000000:18:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    Fabric
        State                             : Completed
        Status                            : Success
        CliqueId                          : 0
        ClusterUUID                       : 00000000-0000-0000-0000-000000000000
        Health
            Bandwidth                     : Full
            Route Recovery in progress    : False
    Processes                             : None

GPU 00000000:2A:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    Fabric
        State                             : In Progress
        Status                            : N/A
    Processes                             : None

GPU 00000000:3A:00.0
    Product Name                          : NVIDIA L4
    Fabric
        State                             : N/A
        Status                            : N/A
    Inforom Version
        State                             : not a fabric state
"""


def test_vpd_marker() -> None:
    assert is_nvlink5_vpd(b"\x82\x05bridge\x90\x10V3\x0bSMDL=SW_MNG\x78")
    assert not is_nvlink5_vpd(b"\x82\x05nic\x90\x04PN\x02ab\x78")


def test_port_guid_and_cap_mask() -> None:
    assert parse_port_guid("fe80:0000:0000:0000:a088:c203:0012:3457\n") == 0xA088C20300123457
    assert parse_port_guid("fe80::1") is None
    assert parse_port_guid("zz80:0000:0000:0000:a088:c203:0012:3457") is None
    assert parse_cap_mask("0x2651e848\n") == 0x2651E848
    assert parse_cap_mask("garbage") is None
    assert usable_management_port(0xA088C20300123457, 0x2651E848)
    assert not usable_management_port(0xA088C20300123457, 0x2651EC48)  # IsSMDisabled
    assert not usable_management_port(0, 0x2651E848)
    assert not usable_management_port(1, None)


def test_overrides_from_env() -> None:
    env = {
        "NVFM_CONFIG_FABRIC_MODE": "1",
        "NVFM_CONFIG_": "x",
        "NVFM_CONFIG_BAD-NAME": "y",
        "NVFM_CONFIG_É": "z",
        "NVFM_CONFIG_1ST": "w",
        "NVFM_CONFIG_LOG_FILE_NAME": "a\nDAEMONIZE=1",
        "PATH": "/bin",
    }
    assert fabric_overrides_from_env(env) == (("FABRIC_MODE", "1"), ("LOG_FILE_NAME", "a DAEMONIZE=1"))


def test_apply_overrides_replaces_or_appends_and_keeps_the_rest() -> None:
    text = "# comment FABRIC_MODE=9\nLOG_LEVEL=4\nFABRIC_MODE=0\nDAEMONIZE=1\n"
    out = apply_overrides(text, [("FABRIC_MODE", "1"), ("NEW_FIELD", r"a\&|b")])
    assert out == "# comment FABRIC_MODE=9\nLOG_LEVEL=4\nFABRIC_MODE=1\nDAEMONIZE=1\n\nNEW_FIELD=a\\&|b\n"
    assert parse_config(out) == {"LOG_LEVEL": "4", "FABRIC_MODE": "1", "DAEMONIZE": "1", "NEW_FIELD": "a\\&|b"}
    assert apply_overrides(out, [("FABRIC_MODE", "1")]) == out  # idempotent: a restart changes nothing


def test_fabric_states() -> None:
    states = parse_fabric_states(SMI_Q)
    assert [(s.pci_id, s.state, s.status) for s in states] == [
        ("00000000:18:00.0", "Completed", "Success"),
        ("00000000:2A:00.0", "In Progress", "N/A"),
        ("00000000:3A:00.0", "N/A", "N/A"),
    ]
    assert [s.completed for s in states] == [True, False, False]
    assert [s.supported for s in states] == [True, True, False]
    failed = parse_fabric_states(SMI_Q.replace("Success", "Timeout"))[0]
    assert failed.failed and not failed.completed


def test_fabric_states_without_fabric_blocks() -> None:
    assert parse_fabric_states("GPU 00000000:18:00.0\n    Product Name : A100\n") == []
    assert parse_fabric_states("") == []
    assert parse_fabric_states("    Fabric\n        State : Completed\n") == []  # no GPU header
