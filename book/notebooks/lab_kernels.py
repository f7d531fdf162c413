"""The kernel manager of ``make lab``: a kernel that no browser tab uses is shut down.

A chapter's kernel holds about 1 GB (torch, the chapter's models and data). JupyterLab's own
"shut down the kernel when closing a notebook" setting (``kernelShutdown``, which
``book.notebooks.lab_settings`` turns on) applies to notebooks opened with JupyterLab's
notebook viewer, but not to the ``.py`` twins, which open with jupytext's viewer: closing one
of those left its kernel running. jupyter_server's culler shuts down kernels idle for a set
time, which also catches a reader who is reloading the page at that moment. This manager
instead shuts a kernel down once no tab has been connected to it for
``shutdown_after_disconnect`` seconds (a reload reconnects well within that), and never
while it is running a cell.

Configured by ``book.notebooks.lab_settings`` (``ServerApp.kernel_manager_class``).
"""

from __future__ import annotations

import asyncio

from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from traitlets import Float


class TabKernelManager(AsyncMappingKernelManager):
    """An ``AsyncMappingKernelManager`` that shuts down kernels no tab is connected to."""

    shutdown_after_disconnect = Float(
        30.0,
        config=True,
        help="Seconds a kernel may stay without any connected tab before it is shut down.",
    )

    def notify_disconnect(self, kernel_id: str) -> None:
        super().notify_disconnect(kernel_id)
        if self._kernel_connections.get(kernel_id) == 0:
            self._schedule_check(kernel_id)

    def _schedule_check(self, kernel_id: str) -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(
            self.shutdown_after_disconnect,
            lambda: asyncio.ensure_future(self._shutdown_if_unused(kernel_id)),
        )

    async def _shutdown_if_unused(self, kernel_id: str) -> None:
        if kernel_id not in self or self._kernel_connections.get(kernel_id, 0) > 0:
            return
        if getattr(self.get_kernel(kernel_id), "execution_state", "") == "busy":
            self._schedule_check(kernel_id)  # let the cell finish first
            return
        self.log.info(
            "Shutting down kernel %s: no tab connected for %.0f s",
            kernel_id,
            self.shutdown_after_disconnect,
        )
        await self.shutdown_kernel(kernel_id)
