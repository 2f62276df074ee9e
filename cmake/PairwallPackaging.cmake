# A Debian package of what `cmake --install` lays out (/usr/sbin/pairwalld, /usr/bin/pairwallctl and
# pairwall-check, the systemd units, the keepalived notify script, the examples):
#
#   cmake --build --preset release --target package   ->  build/pairwall_<version>_<arch>.deb
#
# The library dependencies are read from the binaries by dpkg-shlibdeps, so the package asks for the
# versions it was built against. packaging/debian/ holds the maintainer scripts.
set(PAIRWALL_PACKAGE_MAINTAINER "pairwall developers <root@localhost>"
    CACHE STRING "Maintainer field of the Debian package (a site that builds its own sets its own)")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME pairwall)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${PAIRWALL_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
string(CONCAT CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "pairwalld filters forwarded traffic in userspace through NFQUEUE with a pf-style rule set and a\n"
    "state table, keeps its peer's state table in step over a dedicated sync link, and elects the\n"
    "master of the pair by CARP-like advertisements (or follows keepalived), so that established\n"
    "connections survive the loss of the master.")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Run-time programs, not libraries: the hooks are iptables rules, and the units load the modules.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "iptables, kmod")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "keepalived")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/packaging/debian/postinst ${PROJECT_SOURCE_DIR}/packaging/debian/prerm
    ${PROJECT_SOURCE_DIR}/packaging/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

include(CPack)
