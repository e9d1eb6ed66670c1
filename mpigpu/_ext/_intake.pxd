# What other extensions call in _intake without a Python call (mpigpu/_ext/_front.pyx).
cpdef bint any_device(object sendbuf, object recvbuf) except -1
