"""No NIC view (the pass on): for ab_window.py."""


def nic_rounds_apply(static):
    return False
