from django.contrib import admin

from labapp.admin_addresses import AddressesShownAdmin
from labapp.models import Assignment, Classroom, LabSubmission, Membership


class MembershipInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


class AssignmentInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Assignment
    extra = 0


@admin.register(Classroom)
class ClassroomAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["name", "join_code", "join_open", "join_code_expires_at", "created_at"]
    list_filter = ["join_open"]
    search_fields = ["name", "join_code"]
    inlines = [MembershipInline, AssignmentInline]


@admin.register(LabSubmission)
class LabSubmissionAdmin(AddressesShownAdmin):
    address_fields = ("engine_url",)  # the job's engine, perhaps with its credentials
    readonly_fields = ["engine_url"]  # a record of where the hand-in's run ran
    list_display = ["user", "lab", "passed", "late", "submitted_at", "engine_url"]
    list_filter = ["lab", "passed", "late"]
    search_fields = ["user__username"]
    raw_id_fields = ["user", "job"]
