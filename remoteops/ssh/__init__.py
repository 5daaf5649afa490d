"""The OpenSSH transport: argv for ``ssh`` (``args``), target resolution via ``ssh -G`` (``resolve``),
ControlMaster processes (``master``) and their pool (``pool``), and the one-ssh-process-per-call carrier
(``carrier``).
"""
